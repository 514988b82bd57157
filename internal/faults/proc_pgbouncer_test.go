package faults

// PgBouncer in transaction pooling mode in front of PostgreSQL, the relay's
// --database-url and the writers through it (default_query_exec_mode=exec:
// a transaction pooler cannot keep prepared statements). A transaction
// pooler runs LISTEN on a server connection and hands that connection to
// other clients afterwards: the relay's listener LISTENs without error and
// never hears a notification. The relay must say so (one log line, /readyz)
// and deliver by polling; with --listen-database-url straight to
// PostgreSQL the wake-ups work and latency is milliseconds. Skipped when
// pgbouncer (Debian package pgbouncer) is not installed; .ci/run installs it.

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/metrics"
	"github.com/pgoutbox/outbox/internal/pgtemp"
	"github.com/pgoutbox/outbox/internal/testenv"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

// bouncerEnv is a cluster with the outbox table (public schema: PgBouncer
// 1.18 refuses search_path as a startup parameter), a transaction pooler
// in front of it, and a topic.
type bouncerEnv struct {
	cluster *pgtemp.Cluster
	bouncer *pgtemp.PgBouncer
	// pooledURL reaches the database through pgbouncer.
	pooledURL string
	// pooled is a pool through pgbouncer (the writers); direct one
	// straight to PostgreSQL (the checker).
	pooled, direct *pgxpool.Pool
	k              *testenv.TestKafka
	topic          string
}

func startBouncerEnv(t *testing.T) *bouncerEnv {
	t.Helper()
	if _, err := pgtemp.FindPgBouncer(); err != nil {
		t.Skipf("pgbouncer not installed, PgBouncer tests skipped (apt-get install pgbouncer): %v", err)
	}
	if _, err := pgtemp.FindBinDir(); err != nil {
		t.Skipf("no PostgreSQL server binaries: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := &bouncerEnv{cluster: testenv.Cluster(t)}
	var err error
	if e.bouncer, err = pgtemp.StartPgBouncer(ctx, e.cluster, pgtemp.PgBouncerOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pgbouncer log:\n%s", e.bouncer.Log())
		}
		_ = e.bouncer.Stop()
	})
	e.pooledURL = e.bouncer.DSN("postgres") + "&default_query_exec_mode=exec"
	if e.direct, err = pgxpool.New(ctx, e.cluster.DSN()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.direct.Close)
	if _, err := outboxsql.Migrate(ctx, e.direct); err != nil {
		t.Fatal(err)
	}
	if e.pooled, err = pgxpool.New(ctx, e.pooledURL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.pooled.Close)
	e.k = testenv.Kafka(t)
	e.topic = e.k.Topic(t, 3)
	return e
}

// writeLatencies commits n one-event transactions through pool, each 100ms
// after the previous one's record arrived (longer than the relay's 25ms
// linger after a claim, so each finds the relay idle: only a wake-up or the
// poll finds it), each notifying
// channel "public" (the one writeEvents' writer notifies: the schema's
// name) and waiting for its record on c, and returns the commit-to-record
// latencies.
func writeLatencies(t *testing.T, pool *pgxpool.Pool, c *testenv.Consumer, n int) []time.Duration {
	t.Helper()
	w, err := outbox.NewWriter(outbox.WriterConfig{Channel: "public", Wakeup: outbox.WakeupEveryTx})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var lat []time.Duration
	for i := range n {
		<-time.After(100 * time.Millisecond) // pacing: the relay goes idle
		e := ipEvent("agg-"+string(rune('a'+i%3)), i)
		ipInsert(t, pool, w, e)
		committed := time.Now()
		for {
			r, err := c.Next(ctx)
			if err != nil {
				t.Fatalf("event %d not delivered: %v", i, err)
			}
			if id, _ := uuid.Parse(r.Headers["event_id"]); id == e.ID {
				break
			}
		}
		lat = append(lat, time.Since(committed))
	}
	return lat
}

// median of ds (which it sorts).
func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// scrapeMetric returns the lines of the relay's /metrics that start with
// name.
func scrapeMetric(t *testing.T, addr, name string) []string {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	var out []string
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(l, name) {
			out = append(out, l)
		}
	}
	return out
}

// deafLine is the relay's report of a listener behind a transaction pooler.
const deafLine = "LISTEN is not receiving notifications: --database-url goes through a transaction pooler? connect the listener directly to PostgreSQL with --listen-database-url"

// TestProcPgBouncerListenerThroughTransactionPoolerIsDeaf: everything goes
// through the transaction pooler, the listener too. The relay logs once
// that LISTEN hears nothing and which flag fixes it, /readyz fails on the
// listener naming it, outbox_listener_state says deaf, and every event is
// still delivered, in order, by polling.
func TestProcPgBouncerListenerThroughTransactionPoolerIsDeaf(t *testing.T) {
	t.Parallel()
	e := startBouncerEnv(t)
	p, addr := readinessRelay(t, e.pooledURL, e.k.Brokers, e.topic, "--channel", "public")
	began := time.Now()
	// The listener counts as deaf only after a notification failed to come
	// back for 5 s: a generous deadline.
	r := waitReadyz(t, addr, 60*time.Second, "failing on a deaf listener", func(code int, r metrics.Readiness) bool {
		return failing("listener")(code, r) && strings.HasPrefix(r.Checks["listener"].Detail, "listener is deaf")
	})
	d := r.Checks["listener"].Detail
	t.Logf("through the pooler: /readyz 503 after %s: listener: %s", time.Since(began).Round(100*time.Millisecond), d)
	if !strings.Contains(d, "listener is deaf") || !strings.Contains(d, "--listen-database-url") {
		t.Errorf("listener check detail %q does not say deaf and name --listen-database-url", d)
	}
	if got := strings.Join(r.Failed, ","); got != "listener" {
		t.Errorf("/readyz failed %q, want only the listener", got)
	}
	if !slices.Contains(scrapeMetric(t, addr, `outbox_listener_state{state="deaf"}`), `outbox_listener_state{state="deaf"} 1`) {
		t.Errorf("outbox_listener_state: %v, want deaf 1", scrapeMetric(t, addr, "outbox_listener_state"))
	}
	if got := scrapeMetric(t, addr, "outbox_listener_connected "); !slices.Equal(got, []string{"outbox_listener_connected 0"}) {
		t.Errorf("outbox_listener_connected: %v, want 0", got)
	}
	c := e.k.Consumer(t, e.topic)
	lat := writeLatencies(t, e.pooled, c, 8)
	t.Logf("through the pooler (deaf listener, --poll-interval 500ms): commit-to-record latency median %s, all %v", median(lat), lat)
	// /readyz and the log line report the deaf listener separately: the
	// line may come after /readyz said it.
	testenv.Eventually(t, 30*time.Second, func() bool { return countLines(p, deafLine) > 0 }, "no %q log line", deafLine)
	if n := countLines(p, deafLine); n != 1 {
		t.Errorf("%d %q log lines, want 1:\n%s", n, deafLine, tail(p.Stderr(), 4000))
	}
	writeEvents(t, e.pooled, 100, 5)
	testenv.Eventually(t, 20*time.Second, func() bool { return ipUnpublished(t, e.direct) == 0 }, "not everything delivered by polling")
	checkTopic(t, e.direct, e.k.Brokers, e.topic, "PgBouncer transaction pooling, listener through it (deaf: polling)", 20*time.Second)
}

// TestProcPgBouncerListenerDirect: claims and writers through the
// transaction pooler, --listen-database-url straight to PostgreSQL. The
// relay is ready, wake-ups work (latency far below the poll interval), and
// everything is delivered in order.
func TestProcPgBouncerListenerDirect(t *testing.T) {
	t.Parallel()
	e := startBouncerEnv(t)
	p, addr := readinessRelay(t, e.pooledURL, e.k.Brokers, e.topic, "--channel", "public", "--listen-database-url", e.cluster.DSN())
	r := waitReadyz(t, addr, 60*time.Second, "ready", ready)
	if d := r.Checks["listener"].Detail; d != "listening" {
		t.Errorf("listener check %q, want listening", d)
	}
	c := e.k.Consumer(t, e.topic)
	lat := writeLatencies(t, e.pooled, c, 20)
	m := median(lat)
	t.Logf("listener direct (--poll-interval 500ms): commit-to-record latency median %s, all %v", m, lat)
	if m > 100*time.Millisecond {
		t.Errorf("median latency %s with the listener direct, want well under the 500ms poll interval", m)
	}
	writeEvents(t, e.pooled, 100, 5)
	testenv.Eventually(t, 20*time.Second, func() bool { return ipUnpublished(t, e.direct) == 0 }, "not everything delivered")
	checkTopic(t, e.direct, e.k.Brokers, e.topic, "PgBouncer transaction pooling, listener direct", 20*time.Second)
	if n := countLines(p, "LISTEN is not receiving notifications"); n != 0 {
		t.Errorf("deaf report with the listener direct:\n%s", tail(p.Stderr(), 4000))
	}
	if code, r := readyz(t, addr); code != 200 {
		t.Errorf("/readyz %d at the end: %+v", code, r)
	}
}
