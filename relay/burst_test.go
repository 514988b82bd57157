package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/testenv"
)

// burstDrain starts a relay on an empty table, lets it idle for idle
// (claiming every poll interval, 500 ms: PostgreSQL switches the claim to
// its generic plan, planned on the empty table), then inserts n events in
// one transaction and returns how long they take to be published.
func burstDrain(t *testing.T, n int, idle time.Duration, analyze bool) time.Duration {
	t.Helper()
	ctx := context.Background()
	db, k := testenv.MigratedDB(t), testenv.Kafka(t)
	topic := k.Topic(t, 4)
	h := startRelay(t, db, k, topic, opts{})
	testenv.Eventually(t, 10*time.Second, func() bool { return h.relay.Stats().Claims >= 1 }, "no claim")
	if analyze {
		// What autovacuum does to a table whose events were all published
		// and deleted: its statistics say it is empty.
		if _, err := db.Pool.Exec(ctx, "ANALYZE outbox"); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(idle) // the idle period is the input
	if _, err := db.Pool.Exec(ctx, fmt.Sprintf(`INSERT INTO outbox (id, aggregate_id, event_type, payload)
SELECT gen_random_uuid(), 'agg-' || (i %% 1000), 'burst', '{"n": 1}' FROM generate_series(1, %d) i`, n)); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	testenv.Eventually(t, 5*time.Minute, func() bool { return unpublished(t, db) == 0 }, "burst not drained")
	return time.Since(began)
}

// TestBurstAfterIdleDrainsAsFast: a relay idle for 30 s, then one
// transaction of 100,000 events, drains about as fast as a relay that was
// not idle. Before the plan settings (lease.planSettings), the claim's
// cached generic plan, made while the table was empty, read and sorted
// the whole table at every claim: 20.6 s against 5.8 s (0.28x). The
// benchmark holds the 0.8x target (make bench, burst scenario);
// this test, run beside the others on a 2-core machine, holds 0.6x, which
// the old plan is far from.
func TestBurstAfterIdleDrainsAsFast(t *testing.T) {
	const n = 100000
	fresh := burstDrain(t, n, 0, false)
	idle := burstDrain(t, n, 30*time.Second, false)
	t.Logf("%d events: %s (%.0f/s) with no idle period, %s (%.0f/s) after 30 s idle (ratio %.2f)",
		n, fresh.Round(time.Millisecond), n/fresh.Seconds(), idle.Round(time.Millisecond), n/idle.Seconds(), fresh.Seconds()/idle.Seconds())
	if fresh.Seconds()/idle.Seconds() < 0.6 {
		t.Errorf("after an idle period the burst drains at %.2fx the rate of a fresh relay, want at least 0.6x", fresh.Seconds()/idle.Seconds())
	}
}
