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

// idle_session_timeout set by the DBA on the relay's database (issue 20:
// with 2s, 25 s of idling logged 26 warnings, 13 of them "listener
// disconnected; reconnecting"). The relay turns it off for its own
// sessions: idle for longer than three timeouts (a session without the
// override is closed three times meanwhile), it logs no warning, its
// listener connected once, no session of its own ended with an error, and
// it still delivers at once.
func TestIdleSessionTimeoutDoesNotChurnTheRelay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.Database(t)
	var version int
	if err := db.Pool.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version < 140000 {
		t.Skipf("PostgreSQL %d has no idle_session_timeout", version)
	}
	k := testenv.Kafka(t)
	topic := k.Topic(t, 1)
	if code, _, stderr := runMain(t, ctx, "migrate", "--database-url", db.ConnString); code != 0 {
		t.Fatalf("migrate: %s", stderr)
	}
	var dbname string
	if err := db.Pool.QueryRow(ctx, "SELECT current_database()").Scan(&dbname); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{dbname}.Sanitize()+" SET idle_session_timeout = '1s'"); err != nil {
		t.Fatal(err)
	}
	// The test's own checks and writes go through sessions without the
	// timeout: one of db.Pool's opened from now on would be closed while
	// idle, and counted in sessions_fatal with the probes.
	ocfg, err := pgxpool.ParseConfig(db.ConnString)
	if err != nil {
		t.Fatal(err)
	}
	ocfg.ConnConfig.RuntimeParams["idle_session_timeout"] = "0"
	own, err := pgxpool.NewWithConfig(ctx, ocfg)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	fatal := func() int64 {
		var n int64
		if err := own.QueryRow(ctx, "SELECT sessions_fatal FROM pg_stat_database WHERE datname = current_database()").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	fatalBefore := fatal()

	stderr, stop := runInBackground(t, "run", "--database-url", db.ConnString, "--brokers", k.Brokers[0], "--topic", topic,
		"--metrics-addr", "", "--log-format", "console", "--startup-wait", "30s")
	testenv.Eventually(t, 30*time.Second, func() bool { return strings.Contains(stderr.String(), "\tlistening\t") }, "the relay is not listening:\n%s", stderr)

	// A session of the database's own settings, closed by the timeout
	// three times: the relay's sessions idled as long. It is probed after
	// idling longer than the timeout (a probe is not idle).
	for i := range 3 {
		c, err := pgx.Connect(ctx, db.ConnString)
		if err != nil {
			t.Fatal(err)
		}
		closed := false
		for deadline := time.Now().Add(10 * time.Second); !closed && time.Now().Before(deadline); {
			time.Sleep(1200 * time.Millisecond)
			closed = c.Ping(ctx) != nil
		}
		c.Close(ctx)
		if !closed {
			t.Fatalf("session %d was not closed by idle_session_timeout", i)
		}
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return fatal()-fatalBefore >= 3 }, "pg_stat_database does not count the 3 closed sessions")

	w, err := outbox.NewWriter(outbox.WriterConfig{Wakeup: outbox.WakeupEveryTx})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Add(ctx, own, outbox.Event{AggregateID: "a", Type: "t", Payload: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		var n int
		return own.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE published_at IS NOT NULL").Scan(&n) == nil && n == 1
	}, "the event was not published")
	if code := stop(); code != 0 {
		t.Fatalf("run exit %d:\n%s", code, stderr)
	}
	out := stderr.String()
	for _, bad := range []string{"\tWARN\t", "\tERROR\t"} {
		if strings.Contains(out, bad) {
			t.Errorf("the relay logged %q while idle_session_timeout = 1s:\n%s", strings.TrimSpace(bad), out)
		}
	}
	if n := strings.Count(out, "\tlistening\t"); n != 1 {
		t.Errorf("the listener connected %d times, want once:\n%s", n, out)
	}
	if n := fatal() - fatalBefore; n != 3 {
		t.Errorf("%d sessions ended with an error, want the 3 probes': the relay's own sessions were closed", n)
	}
}
