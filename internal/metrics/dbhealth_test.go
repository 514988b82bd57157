package metrics_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/metrics"
	"github.com/pgoutbox/outbox/internal/pgtemp"
	"github.com/pgoutbox/outbox/internal/testenv"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

// refresher runs m's refresher until the test ends.
func refresher(t *testing.T, m *metrics.Metrics) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = m.RunRefresher(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// gauge returns the value of the metric name (with labels, if any, equal
// to labels) from m's registry, and whether it is there.
func gauge(t *testing.T, m *metrics.Metrics, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, mt := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range mt.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue metric
				}
			}
			switch {
			case mt.GetGauge() != nil:
				return mt.GetGauge().GetValue(), true
			case mt.GetCounter() != nil:
				return mt.GetCounter().GetValue(), true
			}
		}
	}
	return 0, false
}

// checks waits until m's refresher has checked the table n more times.
// CheckTable counts a check before it stores the verdict and logs, so
// the nth check is done only once the one after it is counted.
func checks(t *testing.T, m *metrics.Metrics, n int) {
	t.Helper()
	start, _ := gauge(t, m, "outbox_table_checks_total", nil)
	testenv.Eventually(t, 30*time.Second, func() bool {
		v, _ := gauge(t, m, "outbox_table_checks_total", nil)
		return v >= start+float64(n+1)
	}, "the refresher did not check the table %d more times", n)
}

// startChecked returns Metrics on db refreshing every 100ms, its readiness
// uncached, a relay and a broker attached, and the log lines.
func startChecked(t *testing.T, db *testenv.TestDB) (*metrics.Metrics, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zapcore.InfoLevel)
	m, err := metrics.New(metrics.Config{Interval: 100 * time.Millisecond, ReadyCacheTTL: -1}, db.Pool, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	m.Attach(metrics.Components{Relay: &fakeRelay{}, Broker: pingFunc(func(context.Context) error { return nil })})
	refresher(t, m)
	return m, logs
}

// A relay already running when its table is made UNLOGGED notices within
// a metrics interval: readiness fails on the "table" check naming the table
// and the fix, one error line is logged however long it lasts, and one info
// line once the table is logged again.
func TestRunningRelayNoticesAnUnloggedTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	m, logs := startChecked(t, db)
	checks(t, m, 1)
	if r := m.Ready(ctx); !r.Ready {
		t.Fatalf("not ready on a healthy table: %+v", r)
	}
	if _, err := db.Pool.Exec(ctx, "ALTER TABLE outbox SET UNLOGGED"); err != nil {
		t.Fatal(err)
	}
	checks(t, m, 2)
	r := m.Ready(ctx)
	c := r.Checks["table"]
	if r.Ready || c.OK || !strings.Contains(c.Detail, "outbox table outbox is UNLOGGED") || !strings.Contains(c.Detail, "ALTER TABLE outbox SET LOGGED") {
		t.Fatalf("readiness with an unlogged table: %+v; want the table check failing with the fix", r)
	}
	checks(t, m, 5)
	if lines := logs.FilterLevelExact(zapcore.ErrorLevel).All(); len(lines) != 1 || !strings.Contains(lines[0].ContextMap()["problem"].(string), "ALTER TABLE outbox SET LOGGED") {
		t.Fatalf("error lines over 7 checks: %v; want 1 naming the fix", lines)
	}
	if _, err := db.Pool.Exec(ctx, "ALTER TABLE outbox SET LOGGED"); err != nil {
		t.Fatal(err)
	}
	checks(t, m, 2)
	if r := m.Ready(ctx); !r.Ready {
		t.Fatalf("not ready once the table is logged again: %+v", r)
	}
	if n := logs.FilterLevelExact(zapcore.InfoLevel).FilterMessageSnippet("table is fine again").Len(); n != 1 {
		t.Fatalf("%d info lines once the table is logged again, want 1: %v", n, logs.All())
	}
}

// A sequence restarted below the table's highest seq (issue 20: max seq
// 433,000, ALTER SEQUENCE ... RESTART WITH 1, each new event published
// 47-49 s late, nothing logged, /readyz 200): the running relay logs one
// error naming the setval that fixes it and readiness fails until it is
// run. The published rows' seqs are what it compares with, so it sees the
// restart even once every row is published.
func TestRunningRelayNoticesASequenceBehindTheTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload, published_at)
SELECT gen_random_uuid(), 'a', 't', '{}', now() FROM generate_series(1, 40)`); err != nil {
		t.Fatal(err)
	}
	m, logs := startChecked(t, db)
	checks(t, m, 1)
	if r := m.Ready(ctx); !r.Ready {
		t.Fatalf("not ready on a healthy table: %+v", r)
	}
	if _, err := db.Pool.Exec(ctx, `ALTER SEQUENCE outbox_seq_seq RESTART WITH 1;
INSERT INTO outbox (id, aggregate_id, event_type, payload) VALUES (gen_random_uuid(), 'a', 't', '{}')`); err != nil {
		t.Fatal(err)
	}
	checks(t, m, 2)
	fix := "SELECT setval(pg_get_serial_sequence('outbox','seq'), 40)"
	r := m.Ready(ctx)
	if c := r.Checks["table"]; r.Ready || c.OK || !strings.Contains(c.Detail, fix) {
		t.Fatalf("readiness with the sequence behind: %+v; want the table check failing with %q", r, fix)
	}
	checks(t, m, 5)
	lines := logs.FilterLevelExact(zapcore.ErrorLevel).All()
	if len(lines) != 1 || !strings.Contains(lines[0].ContextMap()["problem"].(string), fix) {
		t.Fatalf("error lines about the sequence: %v; want one naming %q", lines, fix)
	}
	t.Logf("%s: %s", lines[0].Message, lines[0].ContextMap()["problem"])
	if _, err := db.Pool.Exec(ctx, fix); err != nil {
		t.Fatal(err)
	}
	checks(t, m, 2)
	if r := m.Ready(ctx); !r.Ready {
		t.Fatalf("not ready after the fix: %+v", r)
	}
}

// A logical replication slot's retained WAL is a gauge (issue 20: an
// inactive slot left by a Debezium connector keeps WAL until the disk
// fills), labelled by slot, with whether a client reads it. Slots need
// wal_level = logical: a cluster of the test's own.
func TestReplicationSlotGauges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testenv.ClusterWith(t, pgtemp.Options{ExtraConf: map[string]string{"wal_level": "logical"}})
	pool := clusterPool(t, c)
	if _, err := pool.Exec(ctx, `SELECT pg_create_logical_replication_slot('debezium', 'pgoutput')`); err != nil {
		t.Fatal(err)
	}
	m, err := metrics.New(metrics.Config{Interval: 100 * time.Millisecond}, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := outboxsql.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	refresher(t, m)
	checks(t, m, 1)
	before, ok := gauge(t, m, "outbox_replication_slot_retained_wal_bytes", map[string]string{"slot": "debezium"})
	if !ok {
		t.Fatal("no outbox_replication_slot_retained_wal_bytes{slot=\"debezium\"}")
	}
	if active, ok := gauge(t, m, "outbox_replication_slot_active", map[string]string{"slot": "debezium"}); !ok || active != 0 {
		t.Fatalf("outbox_replication_slot_active = %v (%v), want 0", active, ok)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload) SELECT gen_random_uuid(), 'a' || i, 't', '{}' FROM generate_series(1, 2000) i`); err != nil {
		t.Fatal(err)
	}
	checks(t, m, 2)
	after, _ := gauge(t, m, "outbox_replication_slot_retained_wal_bytes", map[string]string{"slot": "debezium"})
	if after <= before || after < 100_000 {
		t.Fatalf("retained WAL %v bytes after 2,000 inserts, %v before; want it to grow", after, before)
	}
	t.Logf("retained WAL: %v bytes, then %v", before, after)
	if _, err := pool.Exec(ctx, `SELECT pg_drop_replication_slot('debezium')`); err != nil {
		t.Fatal(err)
	}
	checks(t, m, 2)
	if _, ok := gauge(t, m, "outbox_replication_slot_retained_wal_bytes", map[string]string{"slot": "debezium"}); ok {
		t.Fatal("the dropped slot's gauge is still there")
	}
}

// clusterPool is a pool on c's postgres database, closed when t ends.
func clusterPool(t *testing.T, c *pgtemp.Cluster) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), c.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Rows published while the check's statement runs are newer than the
// sequence value it read: the check compares that value only with the
// seqs the relay had published before the statement, and never reports a
// healthy table's sequence as behind (it did under load, naming a setval
// that would have moved a live sequence back). Events are inserted and
// "published" as fast as one session can while the check runs again and
// again.
func TestSequenceCheckIsNotFooledByEventsPublishedMeanwhile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	m, err := metrics.New(metrics.Config{Interval: time.Hour, ReadyCacheTTL: -1}, db.Pool, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			var seq int64
			if err := db.Pool.QueryRow(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload, published_at)
VALUES (gen_random_uuid(), 'a', 't', '{}', now()) RETURNING seq`).Scan(&seq); err != nil {
				done <- err
				return
			}
			m.Published([]claim.Row{{Seq: seq, CreatedAt: time.Now()}})
		}
	}()
	defer func() {
		close(stop)
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	for i := 0; i < 300; i++ {
		problem, err := m.CheckTable(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if problem != nil {
			t.Fatalf("check %d: %v", i, problem)
		}
	}
}
