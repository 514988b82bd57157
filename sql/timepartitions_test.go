package sql_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/sqladmin"
	"github.com/pgoutbox/outbox/internal/testenv"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

// migrateTimePartitioned creates the time-partitioned outbox table in db.
func migrateTimePartitioned(t *testing.T, db *testenv.TestDB, ahead int) {
	t.Helper()
	if _, err := outboxsql.MigrateWith(context.Background(), db.Pool, outboxsql.MigrateOptions{TimePartitioned: true, TimePartitionsAhead: ahead}); err != nil {
		t.Fatal(err)
	}
}

// partitionNames lists the table's leaf partitions by name.
func partitionNames(t *testing.T, db *testenv.TestDB, table string) []string {
	t.Helper()
	parts, err := sqladmin.ListTimePartitions(context.Background(), db.Pool, table)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range parts {
		out = append(out, p.Name)
	}
	return out
}

// migrate --time-partitioned: the table is partitioned by RANGE
// (created_at) with the plain table's columns, defaults, triggers and
// indexes; the partitions of today and the days ahead exist with the
// storage parameters, plus a DEFAULT partition; a second run changes
// nothing, a different interval is refused, as is --time-partitioned on an
// existing plain table.
func TestMigrateTimePartitioned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.DB(t)
	migrateTimePartitioned(t, db, 3)
	var now time.Time
	if err := db.Pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	day := now.UTC().Truncate(24 * time.Hour)
	var want []string
	for i := 0; i <= 3; i++ { // today and 3 days ahead
		want = append(want, sqladmin.TimePartitionName("outbox", day.Add(time.Duration(i)*24*time.Hour)))
	}
	want = append(want, "outbox_default")
	if got := partitionNames(t, db, "outbox"); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("partitions %v, want %v", got, want)
	}
	// Every partition has the plain table's storage parameters, triggers
	// and the claim's indexes.
	rows, err := db.Pool.Query(ctx, `SELECT c.relname::text, array_to_string(c.reloptions, ','),
  (SELECT count(*) FROM pg_trigger g WHERE g.tgrelid = c.oid),
  (SELECT count(*) FROM pg_index i WHERE i.indrelid = c.oid)
FROM pg_inherits h JOIN pg_class c ON c.oid = h.inhrelid WHERE h.inhparent = 'outbox'::regclass`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name, opts string
		var triggers, indexes int
		if err := rows.Scan(&name, &opts, &triggers, &indexes); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(opts, "fillfactor=40") || !strings.Contains(opts, "vacuum_index_cleanup=on") || !strings.Contains(opts, "autovacuum_vacuum_scale_factor=0.01") {
			t.Errorf("partition %s options %q, want the outbox table's", name, opts)
		}
		if triggers != 3 || indexes != 5 {
			t.Errorf("partition %s: %d triggers and %d indexes, want 3 (key partition, row checks) and 5", name, triggers, indexes)
		}
	}
	rows.Close()
	// A plain INSERT gets its seq, key partition and row checks.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type) VALUES (gen_random_uuid(), 'a', 't')`); err != nil {
		t.Fatal(err)
	}
	var seq int64
	var kp *int32
	var part string
	if err := db.Pool.QueryRow(ctx, `SELECT seq, key_partition, tableoid::regclass::text FROM outbox`).Scan(&seq, &kp, &part); err != nil {
		t.Fatal(err)
	}
	if seq != 1 || kp == nil || part != want[0] {
		t.Fatalf("row: seq %d key_partition %v in %s, want seq 1, a key partition, in %s", seq, kp, part, want[0])
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type) VALUES (gen_random_uuid(), '', 't')`); err == nil || !strings.Contains(err.Error(), "outbox_aggregate_id_check") {
		t.Fatalf("empty aggregate ID: %v, want the row check", err)
	}
	// An event older than every partition goes to the DEFAULT partition.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, created_at) VALUES (gen_random_uuid(), 'a', 't', now() - interval '30 days')`); err != nil {
		t.Fatal(err)
	}
	if res, err := outboxsql.MigrateWith(ctx, db.Pool, outboxsql.MigrateOptions{TimePartitioned: true, TimePartitionsAhead: 3}); err != nil || len(res) != 0 {
		t.Fatalf("second migrate: %v %v, want nothing applied", res, err)
	}
	if _, err := outboxsql.MigrateWith(ctx, db.Pool, outboxsql.MigrateOptions{TimePartitioned: true, TimePartitionInterval: time.Hour}); err == nil || !strings.Contains(err.Error(), "cannot change") {
		t.Fatalf("another interval: %v, want refused", err)
	}
	if _, err := outboxsql.Migrate(ctx, db.Pool); err != nil {
		t.Fatalf("migrate without the flag on a time-partitioned table: %v", err)
	}
	tp, err := sqladmin.ReadTimePartitioning(ctx, db.Pool, "outbox")
	if err != nil || tp.Interval != 24*time.Hour || tp.Ahead != 3 {
		t.Fatalf("time partitioning %+v %v, want 24h, 3 ahead", tp, err)
	}

	plain := testenv.MigratedDB(t)
	if _, err := outboxsql.MigrateWith(ctx, plain.Pool, outboxsql.MigrateOptions{TimePartitioned: true}); err == nil || !strings.Contains(err.Error(), "not partitioned") {
		t.Fatalf("--time-partitioned on a plain table: %v, want refused", err)
	}
	if tp, err := sqladmin.ReadTimePartitioning(ctx, plain.Pool, "outbox"); err != nil || tp.Interval != 0 {
		t.Fatalf("plain table's time partitioning %+v %v, want none", tp, err)
	}
	if created, err := sqladmin.EnsureTimePartitions(ctx, plain.Pool, "outbox"); err != nil || len(created) != 0 {
		t.Fatalf("EnsureTimePartitions on a plain table: %v %v, want nothing", created, err)
	}
}
