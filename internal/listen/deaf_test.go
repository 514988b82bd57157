package listen

// A listener that cannot hear: through a transaction pooler (PgBouncer
// pool_mode=transaction, which runs LISTEN on a server connection it then
// gives to other clients), on another database than its pinger's, or on a
// hot standby (where LISTEN cannot run). Each is reported once, as its own
// state with a reason, instead of reconnecting quietly for ever.

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/pgoutbox/outbox/internal/pgtemp"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/notify"
)

// observed returns a logger that records every entry (and also writes to
// the test log).
func observed(t *testing.T) (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.DebugLevel)
	return zap.New(zapcore.NewTee(core, testenv.Logger(t).Core())), logs
}

// countMessages counts the log entries whose message starts with prefix at
// level or above.
func countMessages(logs *observer.ObservedLogs, level zapcore.Level, prefix string) int {
	n := 0
	for _, e := range logs.All() {
		if e.Level >= level && strings.HasPrefix(e.Message, prefix) {
			n++
		}
	}
	return n
}

// startCluster starts a throwaway cluster of the test's own, or skips.
func startCluster(t *testing.T) *pgtemp.Cluster { return testenv.Cluster(t) }

func newPool(t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func mustParse(t *testing.T, dsn string) *pgx.ConnConfig {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// switchable connects through whichever config was set last.
type switchable struct {
	cfg atomic.Pointer[pgx.ConnConfig]
}

func (s *switchable) connect(ctx context.Context) (*pgx.Conn, error) {
	return pgx.ConnectConfig(ctx, s.cfg.Load().Copy())
}

// TestDeafThroughTransactionPooler: the listener and its pinger go through
// PgBouncer in transaction pooling mode. LISTEN succeeds, nothing arrives.
// The listener reports StateDeaf with one error line naming the pooler,
// keeps retrying quietly, never claims to listen; once its connection goes
// to PostgreSQL directly, it listens again and hears notifications sent
// through the pooler.
func TestDeafThroughTransactionPooler(t *testing.T) {
	t.Parallel()
	if _, err := pgtemp.FindPgBouncer(); err != nil {
		t.Skipf("pgbouncer is not installed (Debian package pgbouncer): %v", err)
	}
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := pgtemp.StartPgBouncer(ctx, c, pgtemp.PgBouncerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop() })
	pooled := b.DSN("postgres") + "&default_query_exec_mode=exec"
	pinger := newPool(t, pooled)
	var conn switchable
	conn.cfg.Store(mustParse(t, pooled))
	log, logs := observed(t)
	l, err := New(notify.Config{Channel: "outbox", PingInterval: 200 * time.Millisecond, PingTimeout: 500 * time.Millisecond,
		ReconnectMin: 20 * time.Millisecond, ReconnectMax: 100 * time.Millisecond, DeafRetry: 200 * time.Millisecond,
		DeafHint: "connect it directly"}, conn.connect, pinger, log)
	if err != nil {
		t.Fatal(err)
	}
	var states stateLog
	l.OnStateChange = states.add
	run(t, l)

	start := time.Now()
	testenv.Eventually(t, waitTimeout, func() bool { return l.State() == StateDeaf }, "not deaf through the pooler: state %s", l.State())
	t.Logf("deaf after %s: %s", time.Since(start).Round(time.Millisecond), l.Reason())
	if r := l.Reason(); !strings.HasPrefix(r, "LISTEN is not receiving notifications: connect it directly (") || !strings.Contains(r, "pooler") {
		t.Errorf("Reason() = %q, want the hint and the pooler evidence", r)
	}
	// It keeps trying, quietly.
	reconnects := l.Reconnects()
	testenv.Eventually(t, waitTimeout, func() bool { return l.Reconnects() >= reconnects+3 }, "deaf listener does not retry")
	if n := countMessages(logs, zapcore.WarnLevel, "LISTEN is not receiving notifications"); n != 1 {
		t.Errorf("%d deaf report lines, want 1", n)
	}
	if n := logs.FilterLevelExact(zapcore.WarnLevel).Len(); n != 0 {
		t.Errorf("%d warnings while deaf, want none (one error line only): %v", n, logs.FilterLevelExact(zapcore.WarnLevel).All()[0].Message)
	}
	for _, st := range states.get() {
		if st == StateListening {
			t.Fatalf("the listener claimed to listen through a transaction pooler: states %v", states.get())
		}
	}

	// The listener connects directly; the writers (pinger) still go
	// through the pooler.
	conn.cfg.Store(mustParse(t, c.DSN()))
	testenv.Eventually(t, waitTimeout, func() bool { return l.State() == StateListening }, "not listening once connected directly: state %s", l.State())
	if r := l.Reason(); r != "" {
		t.Errorf("Reason() = %q while listening, want empty", r)
	}
	drainWake(l)
	before := l.Notifications()
	if _, err := pinger.Exec(ctx, "SELECT pg_notify('outbox', 'through the pooler')"); err != nil {
		t.Fatal(err)
	}
	waitWake(t, l, "for a notification sent through the pooler")
	// The wake-up may be a reconnect's, if a probe came back late.
	testenv.Eventually(t, waitTimeout, func() bool { return l.Notifications() == before+1 },
		"Notifications() = %d, want %d", l.Notifications(), before+1)

	// A session pooler keeps the server connection for the whole client
	// session: LISTEN works through it, and it is not called deaf.
	sb, err := pgtemp.StartPgBouncer(ctx, c, pgtemp.PgBouncerOptions{PoolMode: "session"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Stop() })
	sl, err := New(notify.Config{Channel: "session", PingInterval: 200 * time.Millisecond, PingTimeout: 500 * time.Millisecond},
		connectWith(mustParse(t, sb.DSN("postgres"))), pinger, log)
	if err != nil {
		t.Fatal(err)
	}
	run(t, sl)
	waitWake(t, sl, "through a session pooler")
	if s := sl.State(); s != StateListening {
		t.Fatalf("State() = %s through a session pooler, want listening (%s)", s, sl.Reason())
	}
	if _, err := pinger.Exec(ctx, "SELECT pg_notify('session', 'x')"); err != nil {
		t.Fatal(err)
	}
	waitWake(t, sl, "for a notification through a session pooler")
}

// TestDeafAfterSilentConnectionsWithoutPooler: the listener LISTENs on
// another database than its pinger notifies (NOTIFY is per database).
// Nothing shows a pooler, so the listener reconnects, and reports
// StateDeaf after DeafAfter silent connections in a row, once.
func TestDeafAfterSilentConnectionsWithoutPooler(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	cfg, _ := connConfig(t, db)
	cfg.Database = "template1"
	probe, err := pgx.ConnectConfig(context.Background(), cfg.Copy())
	if err != nil {
		t.Skipf("cannot connect to template1: %v", err)
	}
	_ = probe.Close(context.Background())
	log, logs := observed(t)
	// PingTimeout bounds each probe, and PingInterval + 2 x PingTimeout
	// a connection's setup (connect, LISTEN, probe): 1 s, not less, so
	// that on a loaded machine no connection is cut off by the setup
	// limit before its probe ends (it would count as a connection that
	// was not silent: "deaf after 4 connections" in a CI run with one
	// core busy).
	l, err := New(notify.Config{Channel: db.Schema, PingInterval: 200 * time.Millisecond, PingTimeout: time.Second,
		ReconnectMin: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond, DeafRetry: 100 * time.Millisecond},
		connectWith(cfg), db.Pool, log)
	if err != nil {
		t.Fatal(err)
	}
	// Reconnects when it turned deaf: the next connection comes
	// DeafRetry later, maybe before the test reads it.
	var atDeaf atomic.Int64
	atDeaf.Store(-1)
	l.OnStateChange = func(s State) {
		if s == StateDeaf {
			atDeaf.CompareAndSwap(-1, l.Reconnects())
		}
	}
	run(t, l)
	testenv.Eventually(t, waitTimeout, func() bool { return l.State() == StateDeaf }, "not deaf: state %s", l.State())
	if n := atDeaf.Load(); n != notify.DefaultDeafAfter {
		t.Errorf("deaf after %d connections, want %d", n, notify.DefaultDeafAfter)
	}
	if r := l.Reason(); !strings.Contains(r, notify.DefaultDeafHint) || !strings.Contains(r, "3 connections in a row") {
		t.Errorf("Reason() = %q, want the default hint and the count", r)
	}
	if n := countMessages(logs, zapcore.WarnLevel, "listener did not receive its probe notification"); n != notify.DefaultDeafAfter-1 {
		t.Errorf("%d probe warnings before the deaf report, want %d", n, notify.DefaultDeafAfter-1)
	}
	reconnects := l.Reconnects()
	testenv.Eventually(t, waitTimeout, func() bool { return l.Reconnects() >= reconnects+2 }, "deaf listener does not retry")
	if n := countMessages(logs, zapcore.WarnLevel, "LISTEN is not receiving notifications"); n != 1 {
		t.Errorf("%d deaf report lines, want 1", n)
	}
}

// TestStandbyReportedUntilPromoted: the listener's server is a hot standby.
// LISTEN cannot run there: the listener reports StateStandby naming the
// server, once, retries quietly, and listens once the standby is promoted.
func TestStandbyReportedUntilPromoted(t *testing.T) {
	t.Parallel()
	primary := startCluster(t)
	standby := testenv.Replica(t, primary)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var at attempts
	log, logs := observed(t)
	l, err := New(notify.Config{ReconnectMin: 10 * time.Millisecond, ReconnectMax: 100 * time.Millisecond, PingInterval: 200 * time.Millisecond, PingTimeout: time.Second},
		at.wrap(connectWith(mustParse(t, standby.DSN()))), newPool(t, standby.DSN()), log)
	if err != nil {
		t.Fatal(err)
	}
	var states stateLog
	l.OnStateChange = states.add
	run(t, l)
	testenv.Eventually(t, waitTimeout, func() bool { return l.State() == StateStandby }, "state %s on a standby, want standby", l.State())
	want := "connected to a standby (in recovery) at 127.0.0.1:" + strconv.Itoa(standby.Port())
	if r := l.Reason(); !strings.HasPrefix(r, want) {
		t.Errorf("Reason() = %q, want it to start with %q", r, want)
	}
	testenv.Eventually(t, waitTimeout, func() bool { return len(at.get()) >= 4 }, "no retries on the standby")
	if n := countMessages(logs, zapcore.WarnLevel, "the listener's server is a standby"); n != 1 {
		t.Errorf("%d standby report lines after %d attempts, want 1", n, len(at.get()))
	}
	if n := logs.FilterLevelExact(zapcore.WarnLevel).Len(); n != 0 {
		t.Errorf("%d warnings on the standby, want none (one error line only)", n)
	}

	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitTimeout, func() bool { return l.State() == StateListening }, "not listening after the promotion: state %s", l.State())
	if r := l.Reason(); r != "" {
		t.Errorf("Reason() = %q while listening", r)
	}
	drainWake(l)
	if _, err := newPool(t, standby.DSN()).Exec(ctx, "SELECT pg_notify('outbox', 'promoted')"); err != nil {
		t.Fatal(err)
	}
	waitWake(t, l, "after the promotion")
	got := states.get()
	if len(got) < 2 || got[0] != StateStandby || got[1] != StateListening {
		t.Errorf("state changes %v, want standby then listening", got)
	}
}

func TestNewStatesAndConfig(t *testing.T) {
	for s, want := range map[State]string{StateDeaf: "deaf", StateStandby: "standby"} {
		if got := s.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(s), got, want)
		}
	}
	c := notify.Config{}.WithDefaults()
	if c.DeafAfter != 3 || c.DeafRetry != 30*time.Second || c.DeafHint != notify.DefaultDeafHint {
		t.Errorf("defaults: %+v", c)
	}
	for field, cfg := range map[string]notify.Config{"Config.DeafAfter": {DeafAfter: -1}, "Config.DeafRetry": {DeafRetry: -time.Second}} {
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), field+":") {
			t.Errorf("%+v: %v, want an error naming %s", cfg, err, field)
		}
	}
	if got := (&StandbyError{Addr: "10.0.0.5:5432"}).Error(); !strings.HasPrefix(got, "connected to a standby (in recovery) at 10.0.0.5:5432") {
		t.Errorf("StandbyError = %q", got)
	}
}
