package relay_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/ownership"
	"github.com/pgoutbox/outbox/internal/produce"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/kafka"
	"github.com/pgoutbox/outbox/lease"
	"github.com/pgoutbox/outbox/relay"
)

// heldPublisher blocks Publish while held (a slow broker: acks=all across
// zones, a leader election).
type heldPublisher struct {
	inner relay.Publisher
	mu    sync.Mutex
	gate  chan struct{} // closed: open
}

func newHeld() *heldPublisher {
	g := make(chan struct{})
	close(g)
	return &heldPublisher{gate: g}
}

func (p *heldPublisher) hold() {
	p.mu.Lock()
	p.gate = make(chan struct{})
	p.mu.Unlock()
}

func (p *heldPublisher) open() {
	p.mu.Lock()
	select {
	case <-p.gate:
	default:
		close(p.gate)
	}
	p.mu.Unlock()
}

func (p *heldPublisher) Publish(ctx context.Context, msgs []kafka.Message) []produce.Result {
	p.mu.Lock()
	g := p.gate
	p.mu.Unlock()
	select {
	case <-g:
	case <-ctx.Done():
	}
	return p.inner.Publish(ctx, msgs)
}

func owners(t *testing.T, db *testenv.TestDB) map[string]int {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), "SELECT coalesce(owner,'') FROM outbox_partitions")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	m := map[string]int{}
	for rows.Next() {
		var o string
		if err := rows.Scan(&o); err != nil {
			t.Fatal(err)
		}
		m[o]++
	}
	return m
}

// A relay joins while the owner's publish of a batch is slow: the owner
// cannot give the joiner's partitions back yet (busy) and marks them
// releasing. Events of such a partition committed meanwhile
// (WakeupEveryTx: the payload names the partition) wake only the owner,
// whose claim skips the releasing partition. Once the slow batch settles,
// the owner must claim again to give the partition back (Relay.tellSettled):
// no notification wakes it for that, and the poll is off (an hour). Found
// by trying to break the key-partition wake-ups: without it the events
// waited for the poll.
func TestReleasingPartitionIsGivenBackOnceItsBatchSettles(t *testing.T) {
	t.Parallel()
	db, k := testenv.MigratedDB(t), testenv.Kafka(t)
	topic := k.Topic(t, 6)
	o := func(id string) opts {
		return opts{relay: relay.Config{PollInterval: time.Hour}, lease: lease.Config{RelayID: id}}
	}
	hp0 := newHeld()
	o0 := o("r0")
	o0.wrapPublisher = func(p relay.Publisher) relay.Publisher {
		hp0.inner = p
		return hp0
	}
	r0 := startRelay(t, db, k, topic, o0)
	testenv.Eventually(t, time.Minute, func() bool {
		own := r0.claimer.Ownership()
		return own.Members == 1 && own.Partitions > 0 && own.Owned == own.Partitions
	}, "r0 did not own every partition")
	parts := r0.claimer.Ownership().Partitions
	w := writer(t, db, outbox.WakeupEveryTx)

	// E1: one event per aggregate, published slowly by r0.
	hp0.hold()
	var aggs []string
	var e1 []outbox.Event
	for i := range 40 {
		a := fmt.Sprint("agg-", i)
		aggs = append(aggs, a)
		e1 = append(e1, event(a, i))
	}
	addTx(t, db, w, e1...)
	testenv.Eventually(t, 30*time.Second, func() bool { return leased(t, db) == len(e1) }, "r0 did not claim E1")

	// r1 joins; r0 rebalances, its share for r1 busy: releasing.
	r1 := startRelay(t, db, k, topic, o("r1"))
	testenv.Eventually(t, time.Minute, func() bool {
		return r0.claimer.Ownership().Members == 2 && r1.claimer.Ownership().Members == 2 && r0.claimer.Ownership().Releasing > 0
	}, "r0 did not start releasing: r0 %+v r1 %+v", r0.claimer.Ownership(), r1.claimer.Ownership())
	assigned := ownership.Assign([]string{r0.claimer.Member(), r1.claimer.Member()}, parts)
	var e2 []outbox.Event
	for i, a := range aggs {
		if assigned[outbox.KeyPartition(a, parts)] == r1.claimer.Member() {
			e2 = append(e2, event(a, 1000+i))
		}
	}
	if len(e2) == 0 {
		t.Fatal("no aggregate of E1 assigned to r1")
	}
	t.Logf("r0 %+v; r1 %+v; owners %v; E2: %d events in r1's partitions", r0.claimer.Ownership(), r1.claimer.Ownership(), owners(t, db), len(e2))
	// E2: events of the partitions being released, each its own
	// transaction; r0 has heard them all before its slow publish ends.
	heard := r0.listener.Notifications()
	for _, e := range e2 {
		addTx(t, db, w, e)
	}
	testenv.Eventually(t, 30*time.Second, func() bool { return r0.listener.Notifications() >= heard+int64(len(e2)) }, "r0 did not hear E2's notifications")
	hp0.open()
	// Everything is published with the poll off; the deadline only stops
	// a hung test.
	testenv.Eventually(t, time.Minute, func() bool { return unpublished(t, db) == 0 },
		"events unpublished after the slow publish ended (poll an hour): r0 %+v (notifications %d, ignored %d); r1 %+v (notifications %d, ignored %d); owners %v",
		r0.claimer.Ownership(), r0.listener.Notifications(), r0.listener.Ignored(),
		r1.claimer.Ownership(), r1.listener.Notifications(), r1.listener.Ignored(), owners(t, db))
}

func leased(t *testing.T, db *testenv.TestDB) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox WHERE published_at IS NULL AND locked_until > now()").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
