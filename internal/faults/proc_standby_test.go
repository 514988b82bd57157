package faults

// The relay and a hot standby: started on one (a replica, or a URL that
// leads to one), or left on one by a failover (the old primary back as a
// replica on the address the relay uses). A standby cannot take the claims'
// writes (SQLSTATE 25006) nor LISTEN; the relay must say "this is a
// standby", not loop on errors: at start it waits for a promotion with
// --startup-wait (exit 1 without, see cmd/outbox-relay's
// TestStandbyAtStartIsNamed), and at run time /readyz names the standby.

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/metrics"
	"github.com/pgoutbox/outbox/internal/pgtemp"
	"github.com/pgoutbox/outbox/internal/testenv"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

// primaryAndStandby starts a cluster with the outbox table (public schema)
// and a streaming replica that has caught up with it.
func primaryAndStandby(t *testing.T) (primary, standby *pgtemp.Cluster, pool *pgxpool.Pool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	primary = testenv.Cluster(t)
	pool = stPool(t, primary.DSN())
	if _, err := outboxsql.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	standby = testenv.Replica(t, primary) // stopped before the primary
	if err := standby.CatchUp(ctx, primary); err != nil {
		t.Fatal(err)
	}
	return primary, standby, pool
}

func stPool(t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// standbyCheck matches /readyz failing on check with a detail naming the
// standby at port.
func standbyCheck(check string, port int) func(int, metrics.Readiness) bool {
	want := "standby (in recovery) at 127.0.0.1:" + strconv.Itoa(port)
	return func(code int, r metrics.Readiness) bool {
		return failing(check)(code, r) && strings.Contains(r.Checks[check].Detail, want)
	}
}

// TestProcStandbyPromotedUnderTheRelay: the relay is started on a hot
// standby with --startup-wait. It logs one line that the database is a
// standby and waits (not started; /readyz names the standby); the primary
// dies and the standby is promoted: the relay starts at once and delivers,
// in order, the events written on the old primary and on the new one.
func TestProcStandbyPromotedUnderTheRelay(t *testing.T) {
	t.Parallel()
	primary, standby, pool := primaryAndStandby(t)
	writeEvents(t, pool, 30, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := standby.CatchUp(ctx, primary); err != nil {
		t.Fatal(err)
	}
	k := testenv.Kafka(t)
	topic := k.Topic(t, 3)
	const waiting = "database is a standby (in recovery): waiting for its promotion"
	p, addr := startMetricsRelay(t, standby.DSN(), k.Brokers, topic, waiting, "--startup-wait", "60s",
		"--channel", "public", "--stall-timeout", "2s", "--metrics-interval", "500ms")
	r := waitReadyz(t, addr, 20*time.Second, "failing on the database, naming the standby", standbyCheck("database", standby.Port()))
	t.Logf("on the standby: /readyz 503: database: %s; relay: %s", r.Checks["database"].Detail, r.Checks["relay"].Detail)
	if strings.Contains(p.Stderr(), "relay starting") || p.Exited() {
		t.Fatalf("the relay started (or exited) on a standby:\n%s", tail(p.Stderr(), 4000))
	}

	// Failover: the primary is gone, the standby is promoted.
	if err := primary.Stop(); err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	// A hang guard: the time is logged, the test is not about it.
	p.WaitReady(60 * time.Second)
	t.Logf("relay started %s after the promotion", time.Since(promoted).Round(time.Millisecond))
	waitReadyz(t, addr, 20*time.Second, "ready after the promotion", ready)
	if n := countLines(p, waiting); n != 1 {
		t.Errorf("%d %q lines, want 1", n, waiting)
	}
	if n := countLines(p, "database promoted"); n != 1 {
		t.Errorf("%d \"database promoted\" lines, want 1", n)
	}
	newPool := stPool(t, standby.DSN())
	writeEvents(t, newPool, 30, 3)
	testenv.Eventually(t, 20*time.Second, func() bool { return ipUnpublished(t, newPool) == 0 }, "not everything delivered after the promotion")
	checkTopic(t, newPool, k.Brokers, topic, "started on a standby, promoted under the relay", 20*time.Second)
}

// TestProcRelayLeftOnADemotedNode: a failover leaves the relay's
// --database-url on the old primary, which comes back as a standby of the
// new one. Claims fail with 25006 and LISTEN cannot run: /readyz fails
// naming the standby (database and listener checks), the listener says so
// in one log line instead of looping on "cannot execute LISTEN during
// recovery". Once the node is promoted again the relay is ready and
// delivers everything in order.
func TestProcRelayLeftOnADemotedNode(t *testing.T) {
	t.Parallel()
	primary, standby, pool := primaryAndStandby(t)
	k := testenv.Kafka(t)
	topic := k.Topic(t, 3)
	p, addr := readinessRelay(t, primary.DSN(), k.Brokers, topic, "--channel", "public")
	waitReadyz(t, addr, 20*time.Second, "ready at start", ready)
	writeEvents(t, pool, 30, 3)
	testenv.Eventually(t, 20*time.Second, func() bool { return ipUnpublished(t, pool) == 0 }, "not delivered before the failover")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	demoted := time.Now()
	if err := primary.Demote(ctx, standby); err != nil {
		t.Fatal(err)
	}
	r := waitReadyz(t, addr, 30*time.Second, "failing on the database, naming the standby", standbyCheck("database", primary.Port()))
	r = waitReadyz(t, addr, 30*time.Second, "failing on the listener, naming the standby", standbyCheck("listener", primary.Port()))
	t.Logf("demoted: /readyz 503 after %s: failed %v; database: %s; listener: %s; relay: %s", time.Since(demoted).Round(100*time.Millisecond),
		r.Failed, r.Checks["database"].Detail, r.Checks["listener"].Detail, r.Checks["relay"].Detail)
	const standbyLine = "the listener's server is a standby (in recovery)"
	testenv.Eventually(t, 10*time.Second, func() bool { return countLines(p, standbyLine) == 1 }, "no %q line", standbyLine)
	if n := countLines(p, "cannot execute LISTEN during recovery"); n != 0 {
		t.Errorf("%d \"cannot execute LISTEN during recovery\" lines, want 0 (the listener checks recovery first)", n)
	}

	if err := primary.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	waitReadyz(t, addr, 20*time.Second, "ready after the promotion", ready)
	if n := countLines(p, standbyLine); n != 1 {
		t.Errorf("%d %q lines, want 1:\n%s", n, standbyLine, tail(p.Stderr(), 4000))
	}
	pool2 := stPool(t, primary.DSN())
	writeEvents(t, pool2, 30, 3)
	testenv.Eventually(t, 20*time.Second, func() bool { return ipUnpublished(t, pool2) == 0 }, "not everything delivered after the promotion")
	checkTopic(t, pool2, k.Brokers, topic, "relay left on a demoted node, promoted again", 20*time.Second)
}
