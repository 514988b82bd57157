package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox/internal/pgtemp"
	"github.com/pgoutbox/outbox/internal/testenv"
)

// An UNLOGGED outbox table loses every event in a crash (issue 20): migrate,
// adopt and run refuse it, exit 1, naming the table and the fix.
func TestUnloggedTableIsRefused(t *testing.T) {
	t.Parallel()
	// A relay that starts anyway stops here (exit 0) and fails the test.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := testenv.DB(t)
	k := testenv.Kafka(t)
	if code, _, stderr := runMain(t, ctx, "migrate", "--database-url", db.ConnString); code != 0 {
		t.Fatalf("migrate: %d %s", code, stderr)
	}
	if _, err := db.Pool.Exec(ctx, "ALTER TABLE outbox SET UNLOGGED"); err != nil {
		t.Fatal(err)
	}
	fix := "ALTER TABLE outbox SET LOGGED"
	for _, args := range [][]string{
		{"migrate", "--database-url", db.ConnString},
		{"run", "--database-url", db.ConnString, "--brokers", k.Brokers[0], "--topic", "t", "--metrics-addr", "", "--startup-wait", "10s"},
	} {
		code, stdout, stderr := runMain(t, ctx, args...)
		if code != exitFailure || !strings.Contains(stderr, "outbox table outbox is UNLOGGED") || !strings.Contains(stderr, fix) || strings.Contains(stdout, "up to date") {
			t.Errorf("%s on an unlogged table: exit %d, stdout %q, stderr %q; want exit 1 naming the table and %q", args[0], code, stdout, stderr, fix)
		}
	}
	if _, err := db.Pool.Exec(ctx, `CREATE UNLOGGED TABLE outboxevent (id uuid PRIMARY KEY, aggregatetype text, aggregateid text NOT NULL, type text NOT NULL, payload jsonb)`); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runMain(t, ctx, "adopt", "--database-url", db.ConnString, "--table", "outboxevent", "--debezium")
	if code != exitFailure || !strings.Contains(stderr, "ALTER TABLE outboxevent SET LOGGED") {
		t.Errorf("adopt of an unlogged table: exit %d, stderr %q", code, stderr)
	}
}

// A sequence restarted below the table's highest seq delays every new
// event until the relay's rescan (issue 20: 46.8-49.0 s each, with status
// saying "claimable 1"): migrate and status report it with the setval that
// fixes it.
func TestMigrateAndStatusReportASequenceBehindTheTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload, published_at)
SELECT gen_random_uuid(), 'a', 't', '{}', now() FROM generate_series(1, 7)`); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runMain(t, ctx, "status", "--database-url", db.ConnString); code != 0 || strings.Contains(stderr, "setval") {
		t.Fatalf("status of a healthy table: %d %s", code, stderr)
	}
	if _, err := db.Pool.Exec(ctx, `ALTER SEQUENCE outbox_seq_seq RESTART WITH 1`); err != nil {
		t.Fatal(err)
	}
	fix := "SELECT setval(pg_get_serial_sequence('outbox','seq'), 7)"
	code, stdout, stderr := runMain(t, ctx, "migrate", "--database-url", db.ConnString)
	if code != 0 || !strings.Contains(stdout, "schema is up to date") || !strings.Contains(stderr, "hands out seq 1 next") || !strings.Contains(stderr, fix) {
		t.Fatalf("migrate: exit %d, stdout %q, stderr %q; want the schema up to date and a warning with %q", code, stdout, stderr, fix)
	}
	t.Logf("migrate: %s", stderr)
	code, stdout, _ = runMain(t, ctx, "status", "--database-url", db.ConnString)
	if code != 0 || !strings.Contains(stdout, "problems:") || !strings.Contains(stdout, fix) {
		t.Fatalf("status: exit %d:\n%s\nwant the problem with %q", code, stdout, fix)
	}
	t.Logf("status:\n%s", stdout)
	code, stdout, _ = runMain(t, ctx, "status", "--database-url", db.ConnString, "--json")
	var r statusReport
	if err := json.Unmarshal([]byte(stdout), &r); code != 0 || err != nil || len(r.Problems) != 1 || !strings.Contains(r.Problems[0], fix) {
		t.Fatalf("status --json: exit %d, %v, problems %q", code, err, r.Problems)
	}
}

// Leftovers of a Debezium installation (issue 20): a logical replication
// slot nobody reads retains WAL until the disk fills, and a FOR ALL TABLES
// publication makes every UPDATE of a table without a primary key fail
// (55000). adopt and status report the slot with its retained WAL and the
// publications covering the table; adopt refuses a table whose UPDATEs
// would fail, naming the fixes. Slots need wal_level = logical: a cluster
// of the test's own.
func TestAdoptAndStatusReportDebeziumLeftovers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testenv.ClusterWith(t, pgtemp.Options{ExtraConf: map[string]string{"wal_level": "logical"}})
	db := &testenv.TestDB{ConnString: c.DSN()}
	conn := func(sql string) {
		t.Helper()
		if err := execSQL(ctx, c.DSN(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	conn(`CREATE TABLE outboxevent (id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL, aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb)`)
	conn(`CREATE TABLE legacy_outbox (id uuid NOT NULL, aggregatetype varchar(255) NOT NULL, aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb)`)
	conn(`CREATE PUBLICATION dbz_publication FOR ALL TABLES`)
	conn(`SELECT pg_create_logical_replication_slot('debezium', 'pgoutput')`)
	// WAL the slot retains.
	conn(`INSERT INTO outboxevent SELECT gen_random_uuid(), 'Order', 'o-' || i, 'Created', '{}' FROM generate_series(1, 1000) i`)

	code, stdout, stderr := runMain(t, ctx, "adopt", "--database-url", db.ConnString, "--table", "outboxevent", "--debezium")
	slotLine := regexp.MustCompile(`debezium \(pgoutput\), inactive, retaining [0-9.]+ [kMGT]?B of WAL`)
	if code != 0 || !slotLine.MatchString(stdout) || !strings.Contains(stdout, "pg_drop_replication_slot('debezium')") || !strings.Contains(stdout, "dbz_publication (FOR ALL TABLES") {
		t.Fatalf("adopt: exit %d, stdout:\n%s\nstderr %s\nwant the inactive slot with its retained WAL and the publication", code, stdout, stderr)
	}
	t.Logf("adopt:\n%s", stdout)
	code, stdout, stderr = runMain(t, ctx, "status", "--database-url", db.ConnString, "--table", "outboxevent", "--debezium")
	if code != 0 || !slotLine.MatchString(stdout) || !strings.Contains(stdout, "dbz_publication") {
		t.Fatalf("status: exit %d, stdout:\n%s\nstderr %s", code, stdout, stderr)
	}
	t.Logf("status:\n%s", stdout)
	code, stdout, _ = runMain(t, ctx, "status", "--database-url", db.ConnString, "--table", "outboxevent", "--debezium", "--json")
	var r statusReport
	if err := json.Unmarshal([]byte(stdout), &r); code != 0 || err != nil || len(r.ReplicationSlots) != 1 || r.ReplicationSlots[0].RetainedWALBytes == nil || *r.ReplicationSlots[0].RetainedWALBytes <= 0 || len(r.Publications) != 1 {
		t.Fatalf("status --json: exit %d, %v: slots %+v, publications %+v", code, err, r.ReplicationSlots, r.Publications)
	}

	code, _, stderr = runMain(t, ctx, "adopt", "--database-url", db.ConnString, "--table", "legacy_outbox", "--debezium")
	for _, want := range []string{"SQLSTATE 55000", "dbz_publication", "ALTER TABLE legacy_outbox REPLICA IDENTITY FULL", "DROP PUBLICATION dbz_publication"} {
		if code != exitFailure || !strings.Contains(stderr, want) {
			t.Errorf("adopt of a table without a primary key under FOR ALL TABLES: exit %d, stderr %q; want exit 1 naming %q", code, stderr, want)
		}
	}
}

// execSQL runs sql on a connection of its own to dsn.
func execSQL(ctx context.Context, dsn, sql string) error {
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, sql)
	return err
}

// --retention-drop-partitions on a plain table cannot get better by
// waiting (issue 29: the relay used to start, warn once and fail every
// retention pass): run refuses it at start, exit 2, naming the flag and
// the table.
func TestRetentionDropPartitionsOnAPlainTableIsRefused(t *testing.T) {
	t.Parallel()
	// A relay that starts anyway stops here (exit 0) and fails the test.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	code, _, stderr := runMain(t, ctx, "run", "--database-url", db.ConnString, "--brokers", k.Brokers[0], "--topic", "t", "--metrics-addr", "",
		"--startup-wait", "10s", "--retention-drop-partitions")
	if code != exitUsage || !strings.Contains(stderr, "--retention-drop-partitions") || !strings.Contains(stderr, "table outbox is not partitioned") {
		t.Fatalf("run --retention-drop-partitions on a plain table: exit %d, stderr %q; want exit 2 naming the flag and the table", code, stderr)
	}
}
