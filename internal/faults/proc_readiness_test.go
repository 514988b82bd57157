package faults

// /readyz means "events are moving": each way the relay can stop moving
// events turns it 503 naming the cause, with one log line, and it turns 200
// again once events move. The relay runs as the real outbox-relay binary
// with its metrics server; the faults are a blackholed broker, a database
// that turns read-only, and a topic that does not exist.

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/faultkit"
	"github.com/pgoutbox/outbox/internal/faultnet"
	"github.com/pgoutbox/outbox/internal/metrics"
	"github.com/pgoutbox/outbox/internal/testenv"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

// freeAddr returns a loopback address with a free port. Another process
// may bind it before the relay does: start relays on it with
// startMetricsRelay.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// readyz GETs /readyz from the relay's metrics server.
func readyz(t testing.TB, addr string) (int, metrics.Readiness) {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0, metrics.Readiness{}
	}
	defer resp.Body.Close()
	var r metrics.Readiness
	_ = json.NewDecoder(resp.Body).Decode(&r)
	return resp.StatusCode, r
}

// waitReadyz polls /readyz until ok returns true, failing the test after
// timeout with the last answer.
func waitReadyz(t testing.TB, addr string, timeout time.Duration, what string, ok func(int, metrics.Readiness) bool) metrics.Readiness {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		code, r := readyz(t, addr)
		if ok(code, r) {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz never %s within %s: last %d %+v", what, timeout, code, r)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func failing(check string) func(int, metrics.Readiness) bool {
	return func(code int, r metrics.Readiness) bool { return code == 503 && slices.Contains(r.Failed, check) }
}

func ready(code int, r metrics.Readiness) bool { return code == 200 && r.Ready }

// startMetricsRelay starts the relay binary with its metrics server on a
// free loopback port and waits until its log holds marker (a line logged
// after the server listens), and returns it with the server's address. The
// port is free when picked, not when the relay binds it: a relay that exits
// because another process took the port meanwhile is started again on a
// new one.
func startMetricsRelay(t *testing.T, dsn string, brokers []string, topic, marker string, extra ...string) (*RelayProc, string) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		addr := freeAddr(t)
		p := startRelayProc(t, dsn, brokers, topic, append([]string{"--metrics-addr", addr}, extra...)...)
		if !faultkit.Wait(60*time.Second, func() bool { return strings.Contains(p.Stderr(), marker) || p.Exited() }) {
			t.Fatalf("%s: no %q line after 60s:\n%s", p.Name, marker, tail(p.Stderr(), 5000))
		}
		if strings.Contains(p.Stderr(), marker) {
			return p, addr
		}
		if attempt < 5 && strings.Contains(p.Stderr(), "address already in use") {
			t.Logf("%s: %s was taken before the relay bound it; starting again on another port", p.Name, addr)
			continue
		}
		t.Fatalf("%s exited before %q: %v\n%s", p.Name, marker, p.Err(), tail(p.Stderr(), 5000))
	}
}

// readinessRelay starts the relay binary with its metrics server and a 2 s
// stall timeout, and waits until it is ready.
func readinessRelay(t *testing.T, dsn string, brokers []string, topic string, extra ...string) (*RelayProc, string) {
	t.Helper()
	args := append([]string{"--stall-timeout", "2s", "--metrics-interval", "500ms",
		"--retry-min", "100ms", "--retry-max", "1s", "--kafka-write-timeout", "1s"}, extra...)
	return startMetricsRelay(t, dsn, brokers, topic, "relay starting", args...)
}

// countLines counts the log lines of p that contain s.
func countLines(p *RelayProc, s string) int { return strings.Count(p.Stderr(), s) }

// TestProcReadinessBrokerBlackholed: the broker accepts connections and
// never answers (blackhole) for 10 s while writers go on: /readyz turns 503
// with the relay check naming the publish step within the stall timeout,
// one "relay stalled" line is logged, and once the broker answers again
// /readyz is 200 and publishing resumes.
func TestProcReadinessBrokerBlackholed(t *testing.T) {
	t.Parallel()
	db := testenv.MigratedDB(t)
	k, ln := ipFaultableKafka(t)
	topic := k.Topic(t, 3)
	t.Cleanup(func() { ln.SetMode(faultnet.Up) })
	p, addr := readinessRelay(t, db.ConnString, k.Brokers, topic)
	waitReadyz(t, addr, 20*time.Second, "ready at start", ready)
	load := ipStartRateLoad(t, db.Pool, writer(t, db.Pool), "agg", 200, 1, 50, 2)
	testenv.Eventually(t, 15*time.Second, func() bool { return ipPublished(t, db.Pool) >= 100 }, "nothing published before the fault")

	ln.SetMode(faultnet.Blackhole)
	began := time.Now()
	r := waitReadyz(t, addr, 20*time.Second, "failing on the relay check", failing("relay"))
	t.Logf("blackhole: /readyz 503 after %s: relay: %s", time.Since(began).Round(100*time.Millisecond), r.Checks["relay"].Detail)
	if d := r.Checks["relay"].Detail; !strings.Contains(d, "publish") {
		t.Errorf("relay check detail %q does not name the publish step", d)
	}
	time.Sleep(max(0, 10*time.Second-time.Since(began))) // the fault lasts 10 s
	// /readyz computes the stall on request, the line is logged on the
	// watcher's next tick: wait for it before counting.
	testenv.Eventually(t, 30*time.Second, func() bool { return countLines(p, "relay stalled") > 0 }, "no \"relay stalled\" line")
	if n := countLines(p, "relay stalled"); n != 1 {
		t.Errorf("%d \"relay stalled\" log lines during the blackhole, want 1", n)
	}
	published := ipPublished(t, db.Pool)
	ln.SetMode(faultnet.Up)
	ended := time.Now()
	waitReadyz(t, addr, 20*time.Second, "ready after the broker came back", ready)
	testenv.Eventually(t, 10*time.Second, func() bool { return ipPublished(t, db.Pool) > published+200 }, "publishing did not resume within 10 s of the broker's return")
	t.Logf("broker back: ready and publishing again %s after", time.Since(ended).Round(100*time.Millisecond))
	testenv.Eventually(t, 10*time.Second, func() bool { return countLines(p, "relay moving again") == 1 }, "no \"relay moving again\" line")
	load.Stop()
	testenv.Eventually(t, 30*time.Second, func() bool { return ipUnpublished(t, db.Pool) == 0 }, "backlog not drained")
	checkTopic(t, db.Pool, k.Brokers, topic, "broker blackholed 10s (readiness)", 30*time.Second)
}

// TestProcReadinessDatabaseReadOnly: the database turns read-only under the
// relay for 10 s (what a failover to a replica does; here ALTER SYSTEM SET
// default_transaction_read_only = on and a reload): every claim fails with
// SQLSTATE 25006 while the database still answers pings. /readyz turns 503
// with the relay check naming the claim step and the error, one line is
// logged, and once the database is writable again /readyz is 200 and the
// events written before and after are published. Its own cluster: the
// setting is cluster-wide.
func TestProcReadinessDatabaseReadOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster := testenv.Cluster(t)
	pool, err := pgxpool.New(ctx, cluster.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := outboxsql.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	k := testenv.Kafka(t)
	topic := k.Topic(t, 3)
	p, addr := readinessRelay(t, cluster.DSN(), k.Brokers, topic, "--channel", "outbox")
	waitReadyz(t, addr, 20*time.Second, "ready at start", ready)
	w, err := outbox.NewWriter(outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	load := ipStartRateLoad(t, pool, w, "agg", 200, 1, 50, 2)
	testenv.Eventually(t, 15*time.Second, func() bool { return ipPublished(t, pool) >= 100 }, "nothing published before the fault")
	// One session of its own, writable whatever the server's default, so
	// that it can turn the default back off.
	admin, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Release)
	if _, err := admin.Exec(ctx, "SET default_transaction_read_only = off"); err != nil {
		t.Fatal(err)
	}
	setReadOnly := func(on bool) {
		v := "off"
		if on {
			v = "on"
		}
		for _, q := range []string{"ALTER SYSTEM SET default_transaction_read_only = " + v, "SELECT pg_reload_conf()"} {
			if _, err := admin.Exec(ctx, q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	}
	t.Cleanup(func() { setReadOnly(false) })
	setReadOnly(true)
	began := time.Now()
	r := waitReadyz(t, addr, 20*time.Second, "failing on the relay check", failing("relay"))
	t.Logf("read-only: /readyz 503 after %s: relay: %s", time.Since(began).Round(100*time.Millisecond), r.Checks["relay"].Detail)
	if d := r.Checks["relay"].Detail; !strings.Contains(d, "claim") || !strings.Contains(d, "25006") {
		t.Errorf("relay check detail %q does not name the claim step and SQLSTATE 25006", d)
	}
	if !r.Checks["database"].OK {
		t.Errorf("the database check failed (%s); a read-only database still answers pings, only the relay check should say it", r.Checks["database"].Detail)
	}
	time.Sleep(max(0, 10*time.Second-time.Since(began)))
	// /readyz computes the stall on request, the line is logged on the
	// watcher's next tick: wait for it before counting.
	testenv.Eventually(t, 30*time.Second, func() bool { return countLines(p, "relay stalled") > 0 }, "no \"relay stalled\" line")
	if n := countLines(p, "relay stalled"); n != 1 {
		t.Errorf("%d \"relay stalled\" log lines while read-only, want 1", n)
	}
	published := ipPublished(t, pool)
	setReadOnly(false)
	ended := time.Now()
	waitReadyz(t, addr, 20*time.Second, "ready after the database turned writable", ready)
	testenv.Eventually(t, 10*time.Second, func() bool { return ipPublished(t, pool) > published+200 }, "publishing did not resume within 10 s of the database turning writable")
	t.Logf("writable again: ready and publishing %s after", time.Since(ended).Round(100*time.Millisecond))
	load.Stop()
	testenv.Eventually(t, 30*time.Second, func() bool { return ipUnpublished(t, pool) == 0 }, "backlog not drained")
	checkTopic(t, pool, k.Brokers, topic, "database read-only 10s (readiness)", 30*time.Second)
}

// TestProcReadinessMissingTopic: the relay's --topic does not exist. At
// start one error line names the topic; /readyz is 503 with the broker
// check naming it; events written meanwhile wait. Once the topic is
// created, /readyz is 200 and the events are delivered.
func TestProcReadinessMissingTopic(t *testing.T) {
	t.Parallel()
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	topic := testenv.TopicName(t)
	p, addr := readinessRelay(t, db.ConnString, k.Brokers, topic)
	if n := countLines(p, "topic check failed"); n != 1 || !strings.Contains(p.Stderr(), topic) {
		t.Errorf("%d \"topic check failed\" lines at start naming %s, want 1:\n%s", n, topic, tail(p.Stderr(), 3000))
	}
	r := waitReadyz(t, addr, 20*time.Second, "failing on the broker check", failing("broker"))
	if d := r.Checks["broker"].Detail; !strings.Contains(d, topic) {
		t.Errorf("broker check detail %q does not name the topic", d)
	}
	t.Logf("missing topic: /readyz 503: broker: %s", r.Checks["broker"].Detail)
	writeEvents(t, db.Pool, 20, 4)
	k.NamedTopic(t, topic, 3)
	waitReadyz(t, addr, 20*time.Second, "ready once the topic exists", ready)
	testenv.Eventually(t, 20*time.Second, func() bool { return ipUnpublished(t, db.Pool) == 0 }, "events not delivered once the topic exists")
	checkTopic(t, db.Pool, k.Brokers, topic, "missing topic, then created", 20*time.Second)
}
