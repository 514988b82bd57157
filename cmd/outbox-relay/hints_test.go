package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/testenv"
)

// What a new user got wrong in a trial from the README, and what each
// command now says: every message names the fix that works.
func TestHintsNameTheFixThatWorks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	url := db.ConnString
	want := func(what string, code int, stderr string, wantCode int, parts ...string) {
		t.Helper()
		if code != wantCode {
			t.Errorf("%s: exit %d, want %d; stderr %q", what, code, wantCode, stderr)
		}
		for _, p := range parts {
			if !strings.Contains(stderr, p) {
				t.Errorf("%s: stderr %q does not say %q", what, stderr, p)
			}
		}
	}

	// A role with no privilege on the table: the missing privileges in
	// one line, with the grants command, not a bare "permission denied".
	role, roleURL := db.Role(t)
	code, _, stderr := runMain(t, ctx, "status", "--database-url", roleURL)
	want("status as a role without grants", code, stderr, exitFailure,
		"lacks privileges", "SELECT on TABLE outbox", "UPDATE on TABLE outbox", "outbox-relay grants --role "+role)

	// A Debezium table read without --debezium: the flags, not migrate.
	createDebeziumTable(t, db)
	code, _, stderr = runMain(t, ctx, "status", "--database-url", url, "--table", "outboxevent")
	want("status of a Debezium table without --debezium", code, stderr, exitFailure, "--column-aggregate-id", "--debezium")
	if strings.Contains(stderr, "outbox-relay migrate") {
		t.Errorf("status of a Debezium table without --debezium suggests migrate: %q", stderr)
	}
	// migrate on it refuses before changing anything.
	code, _, stderr = runMain(t, ctx, "migrate", "--database-url", url, "--table", "outboxevent")
	want("migrate of a Debezium table", code, stderr, exitFailure, "without an aggregate_id column", "outbox-relay adopt --table outboxevent")
	var history bool
	if err := db.Pool.QueryRow(ctx, `SELECT to_regclass('outboxevent_schema_migrations') IS NOT NULL`).Scan(&history); err != nil || history {
		t.Errorf("migrate of a Debezium table left outboxevent_schema_migrations behind (%v)", err)
	}

	// A name migrate cannot create: quoted, and adopt named instead.
	code, _, stderr = runMain(t, ctx, "status", "--database-url", url, "--table", "Bad Name")
	want("status of a missing table migrate cannot create", code, stderr, exitFailure, "outbox-relay adopt --table 'Bad Name'", "plain lower-case")

	// A schema migrate cannot name its history table in: refused before
	// anything is created.
	if _, err := db.Pool.Exec(ctx, `CREATE SCHEMA "Billing_`+db.Schema+`"`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Pool.Exec(context.Background(), `DROP SCHEMA "Billing_`+db.Schema+`" CASCADE`) })
	code, _, stderr = runMain(t, ctx, "migrate", "--database-url", url, "--table", "Billing_"+db.Schema+".ev")
	want("migrate in a schema that needs quotes", code, stderr, exitFailure, "schema name", "plain lower-case", "outbox-relay adopt")

	// adopt names the table to adopt and the columns it lacks.
	code, _, stderr = runMain(t, ctx, "adopt", "--database-url", url, "--debezium")
	want("adopt without --table", code, stderr, exitUsage, "--table: name the existing table to adopt")
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE weird (id uuid PRIMARY KEY, agg text NOT NULL, kind text NOT NULL, body jsonb)`); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runMain(t, ctx, "adopt", "--database-url", url, "--table", "weird", "--debezium")
	want("adopt of a table without Debezium's columns", code, stderr, exitFailure,
		`aggregate ID column "aggregateid" (AdoptColumns.AggregateID, --column-aggregate-id)`, `event type column "type" (AdoptColumns.EventType, --column-event-type)`,
		`payload column "payload" (AdoptColumns.Payload, --column-payload)`, "nothing was changed")
	var seq bool
	if err := db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_name = 'weird' AND column_name = 'seq')`).Scan(&seq); err != nil || seq {
		t.Errorf("the refused adopt changed the table (seq column added: %v, %v)", seq, err)
	}
	// inspect of a bigint ID column, with an ID out of its range: not
	// found, saying why, and JSON with --json.
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE bigid (id bigserial PRIMARY KEY, aggregatetype varchar(255) NOT NULL, aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb)`); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runMain(t, ctx, "adopt", "--database-url", url, "--table", "bigid", "--debezium"); code != 0 {
		t.Fatalf("adopt bigid: %d %s", code, stderr)
	}
	code, out, stderr := runMain(t, ctx, "inspect", "--database-url", url, "--table", "bigid", "--debezium", "--event-id", "99999999999999999999", "--json")
	want("inspect of an out-of-range bigint ID", code, stderr, exitFailure, `is not a bigint`)
	if !strings.Contains(out, `"found": false`) && !strings.Contains(out, `"found":false`) {
		t.Errorf("inspect --json of an out-of-range bigint ID: stdout %q, want found false", out)
	}

	// Rows already in the table: adopt says the relay will publish them.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO weird VALUES (gen_random_uuid(), 'a', 'k', '{}'), (gen_random_uuid(), 'b', 'k', '{}')`); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = runMain(t, ctx, "adopt", "--database-url", url, "--table", "weird", "--column-aggregate-id", "agg", "--column-event-type", "kind", "--column-payload", "body")
	want("adopt naming the columns", code, stderr, 0)
	if !strings.Contains(out, "--column-aggregate-id agg") {
		t.Errorf("adopt naming the columns: stdout %q does not repeat the flags", out)
	}
	if !strings.Contains(out, "note: 2 rows already in the table are unpublished") || !strings.Contains(out, "Rows already in an adopted table") {
		t.Errorf("adopt of a table holding 2 rows: stdout %q does not say the relay will publish them", out)
	}
}

// --brokers naming a server of another protocol stops run at once, with
// the reason, even with --startup-wait 0 (wait for ever): waiting will not
// make it a Kafka broker.
func TestRunStopsAtOnceAtAServerThatIsNotKafka(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := testenv.MigratedDB(t)
	addr := testenv.NotKafka(t, testenv.HTTPBadRequest)
	start := time.Now()
	code, _, stderr := runMain(t, ctx, "run", "--database-url", db.ConnString, "--brokers", addr, "--topic", "t",
		"--metrics-addr", "", "--startup-wait", "0")
	if code != exitFailure || !strings.Contains(stderr, "did not answer as a Kafka broker") || !strings.Contains(stderr, addr) {
		t.Fatalf("run at a non-Kafka server: exit %d, stderr %q", code, stderr)
	}
	if ctx.Err() != nil {
		t.Fatalf("run at a non-Kafka server did not stop within 30 s (%v)", time.Since(start))
	}
	t.Logf("stopped after %v: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(stderr))
}

// While run waits at start for a broker it cannot reach, /readyz's relay
// check says what it waits for and why (the database is fine), as the
// log does, instead of "waiting for the database and the broker".
func TestReadyzSaysWhatTheStartWaitsFor(t *testing.T) {
	t.Parallel()
	db := testenv.MigratedDB(t)
	down := testenv.RefusedAddr(t)
	r := startRun(t, "--database-url", db.ConnString, "--brokers", down, "--topic", "t", "--metrics-addr", "127.0.0.1:0")
	var detail string
	testenv.Eventually(t, 20*time.Second, func() bool {
		code, body := getReadyz(t, r.addr)
		checks, _ := body["checks"].(map[string]any)
		rel, _ := checks["relay"].(map[string]any)
		detail, _ = rel["detail"].(string)
		return code == 503 && strings.Contains(detail, "starting: waiting for the broker") && strings.Contains(detail, down)
	}, "readyz never said the start waits for the broker %s:\n%s", down, r.stderr)
	t.Logf("relay check: %s", detail)
}

// A --claim-window shorter than the writers' wake-up interval is accepted
// (writers may wake per transaction) but said, once, at start: with
// debounced writers some events would wait for the poll interval.
func TestShortClaimWindowIsWarnedOf(t *testing.T) {
	t.Parallel()
	db := testenv.MigratedDB(t)
	k := testenv.KafkaFake(t)
	r := startRun(t, "--database-url", db.ConnString, "--brokers", k.Brokers[0], "--topic", k.Topic(t, 1),
		"--metrics-addr", "", "--claim-window", "1ms")
	testenv.Eventually(t, 20*time.Second, func() bool { return strings.Contains(r.stderr.String(), "relay starting") },
		"the relay never started:\n%s", r.stderr)
	if n := strings.Count(r.stderr.String(), "--claim-window is shorter than the writers' default wake-up interval"); n != 1 {
		t.Errorf("%d warnings of the short --claim-window, want 1:\n%s", n, r.stderr)
	}
}
