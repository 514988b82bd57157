package faults

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/faultkit"
	"github.com/pgoutbox/outbox/internal/testenv"
)

// TestProcSIGTERMWithTheDatabaseFrozen: a relay whose database
// connections (pool and LISTEN session) go through a proxy is publishing
// a steady load when the proxy stops forwarding (a network partition, a
// frozen server: connections stay open and nothing answers), then gets
// SIGTERM with --shutdown-timeout 2s. It exits within the shutdown timeout
// plus 2 s (issue 20: 23.5 s), exit 0, and says in one line what it could
// not do. The events it held come back when their lease ends: once the
// proxy forwards again, a second relay publishes every event.
func TestProcSIGTERMWithTheDatabaseFrozen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	topic := k.Topic(t, 2)
	dsn, proxy := proxiedDSN(t, db.ConnString)
	const shutdownTimeout = 2 * time.Second
	r, _ := startMetricsRelay(t, dsn, k.Brokers, topic, "relay starting", "--relay-id", "frozen", "--shutdown-timeout", shutdownTimeout.String(),
		"--lease", "5s")
	load := faultkit.StartLoad(t, db.Pool, writer(t, db.Pool), "agg", 20, 5, 5*time.Millisecond)
	testenv.Eventually(t, 20*time.Second, func() bool {
		var n int
		_ = db.Pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE published_at IS NOT NULL").Scan(&n)
		return n >= 200
	}, "the relay published nothing before the fault")

	proxy.Blackhole()
	// The relay's next claims and marks reach the blackhole.
	dropped := proxy.Dropped()
	testenv.Eventually(t, time.Minute, func() bool { return proxy.Dropped() > dropped }, "no statement of the relay reached the blackhole")
	began := time.Now()
	r.Term()
	err := r.WaitTimeout(shutdownTimeout + 10*time.Second)
	took := time.Since(began)
	t.Logf("exited %s after SIGTERM (err %v)", took.Round(10*time.Millisecond), err)
	if err != nil {
		t.Errorf("exit status after SIGTERM: %v, want 0", err)
	}
	if took > shutdownTimeout+2*time.Second {
		t.Errorf("exited %s after SIGTERM, want within --shutdown-timeout %s plus 2 s", took.Round(10*time.Millisecond), shutdownTimeout)
	}
	var lines []string
	for _, l := range strings.Split(r.Stderr(), "\n") {
		if strings.Contains(l, "shutdown incomplete") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 {
		t.Errorf("%d \"shutdown incomplete\" lines, want 1 saying what the relay could not do:\n%s", len(lines), tail(r.Stderr(), 6000))
	} else {
		t.Logf("%s", lines[0])
	}

	load.Stop()
	proxy.Restore()
	b := startRelayProc(t, db.ConnString, k.Brokers, topic, "--relay-id", "after", "--lease", "5s")
	b.WaitReady(30 * time.Second)
	rep := checkTopic(t, db.Pool, k.Brokers, topic, "SIGTERM, database frozen", 60*time.Second)
	if !rep.OK() || rep.Delivered != int(load.Committed.Load()) {
		t.Fatalf("checker: %v (committed %d)", rep, load.Committed.Load())
	}
}
