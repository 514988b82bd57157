package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testenv"
)

// runInBackground runs the command line args until the returned stop is
// called, with stderr in a buffer the test can read meanwhile; stop waits
// for Main and returns its exit code.
func runInBackground(t *testing.T, args ...string) (stderr *testenv.SyncBuffer, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stderr = &testenv.SyncBuffer{}
	var stdout testenv.SyncBuffer
	done := make(chan int, 1)
	go func() { done <- Main(ctx, args, &stdout, stderr) }()
	var code *int
	stop = func() int {
		if code == nil {
			cancel()
			c := <-done
			code = &c
		}
		return *code
	}
	t.Cleanup(func() { stop() })
	return stderr, stop
}

// A least-privileged role (issue 20): with only SELECT and UPDATE on the
// table, run names every missing privilege in one line at start, and says
// that the held-snapshot watch cannot see other roles' transactions. With
// what `outbox-relay grants` prints (run as the owner), the relay and a
// writer of their own roles deliver every event, and neither line appears.
func TestLeastPrivilegeRoleWithTheGrantsScript(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	topic := k.Topic(t, 2)
	relayRole, relayURL := db.Role(t)
	writerRole, writerURL := db.Role(t)
	if _, err := db.Pool.Exec(ctx, "GRANT SELECT, UPDATE ON outbox TO "+relayRole); err != nil {
		t.Fatal(err)
	}
	run := func() (*testenv.SyncBuffer, func() int) {
		return runInBackground(t, "run", "--database-url", relayURL, "--brokers", k.Brokers[0], "--topic", topic,
			"--channel", db.Schema, "--metrics-addr", "", "--poll-interval", "100ms", "--startup-wait", "30s", "--log-format", "console")
	}
	stderr, stop := run()
	testenv.Eventually(t, 30*time.Second, func() bool {
		s := stderr.String()
		return strings.Contains(s, "lacks privileges") && strings.Contains(s, "watches only this role's own sessions")
	}, "run as a role with SELECT, UPDATE did not report its missing privileges and the blind watch:\n%s", stderr)
	if code := stop(); code != 0 {
		t.Fatalf("run exit %d:\n%s", code, stderr)
	}
	var lines []string
	for _, l := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(l, "lacks privileges") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 {
		t.Fatalf("%d lines name missing privileges, want 1:\n%s", len(lines), stderr)
	}
	for _, want := range []string{"DELETE on TABLE outbox (", "SELECT on TABLE outbox_order_guard", "INSERT on TABLE outbox_order_guard",
		"UPDATE on TABLE outbox_order_guard", "DELETE on TABLE outbox_order_guard", "SELECT on SEQUENCE outbox_seq_seq", "pg_read_all_stats",
		"SELECT on TABLE outbox_partitions", "UPDATE on TABLE outbox_partitions", "INSERT on TABLE outbox_relays", "DELETE on TABLE outbox_relays",
		"UPDATE on TABLE outbox_partitioning"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("the line does not name %q: %s", want, lines[0])
		}
	}
	t.Logf("%s", lines[0])

	code, script, errOut := runMain(t, ctx, "grants", "--role", relayRole, "--writer-role", writerRole)
	if code != 0 {
		t.Fatalf("grants: %d %s", code, errOut)
	}
	if _, err := db.Pool.Exec(ctx, script, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("the grants script: %v\n%s", err, script)
	}

	stderr, stop = run()
	testenv.Eventually(t, 30*time.Second, func() bool { return strings.Contains(stderr.String(), "relay starting") }, "relay did not start:\n%s", stderr)
	wpool, err := pgxpool.New(ctx, writerURL)
	if err != nil {
		t.Fatal(err)
	}
	defer wpool.Close()
	w, err := outbox.NewWriter(outbox.WriterConfig{Channel: db.Schema, Wakeup: outbox.WakeupEveryTx})
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	for i := range n {
		tx, err := wpool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Add(ctx, tx, outbox.Event{AggregateID: "a", Type: "t", Payload: json.RawMessage(`{}`)}); err != nil {
			_ = tx.Rollback(ctx) // or closing the pool waits for it
			t.Fatalf("writer role, event %d: %v", i, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		var published int
		return db.Pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE published_at IS NOT NULL").Scan(&published) == nil && published == n
	}, "the least-privileged relay did not publish the %d events:\n%s", n, stderr)
	if code := stop(); code != 0 {
		t.Fatalf("run exit %d:\n%s", code, stderr)
	}
	for _, bad := range []string{"lacks privileges", "watches only this role's own sessions", "permission denied"} {
		if strings.Contains(stderr.String(), bad) {
			t.Errorf("with the granted privileges the log says %q:\n%s", bad, stderr)
		}
	}
}
