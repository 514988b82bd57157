package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/lease"
	"github.com/pgoutbox/outbox/relay"
)

// Three relays on one table with a backlog of 30,000 events over 100 hot
// aggregates (before key partitions, such a backlog drained 40 times
// slower with three relays than with one: every claim stepped over the
// rows the others held, behind one lock): the relays split the key
// partitions (each owns a third, within one), each publishes a share of
// the backlog, every event is published once and every aggregate's
// events arrive in order.
func TestRelaysShareTheKeyPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, k := testenv.MigratedDB(t), testenv.Kafka(t)
	topic := k.Topic(t, 6)
	const n, aggregates = 30000, 100
	var hs []*harness
	for i := range 3 {
		hs = append(hs, startRelay(t, db, k, topic, opts{lease: lease.Config{RelayID: fmt.Sprint("r", i)}}))
	}
	// The backlog comes in one transaction once all three have joined:
	// inserted before, it could be drained by the first relay before a
	// slow start of the third, which would then publish nothing.
	testenv.Eventually(t, time.Minute, func() bool {
		for _, h := range hs {
			if h.claimer.Ownership().Members != 3 {
				return false
			}
		}
		return true
	}, "the three relays did not all join")
	if _, err := db.Pool.Exec(ctx, fmt.Sprintf(`INSERT INTO outbox (id, aggregate_id, event_type, payload)
SELECT gen_random_uuid(), 'agg-' || (i %% %d), 'backlog', jsonb_build_object('n', i) FROM generate_series(1, %d) i`, aggregates, n)); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	testenv.Eventually(t, 2*time.Minute, func() bool { return unpublished(t, db) == 0 }, "the backlog was not drained")
	drained := time.Since(began)
	var shares []int64
	for _, h := range hs {
		st, own := h.relay.Stats(), h.claimer.Ownership()
		shares = append(shares, st.Published)
		if st.Published == 0 {
			t.Errorf("%s published nothing (ownership %+v)", own.Member, own)
		}
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		for _, h := range hs {
			if o := h.claimer.Ownership(); o.Members != 3 || o.Owned < o.Partitions/3 || o.Owned > (o.Partitions+2)/3 || o.Releasing > 0 {
				return false
			}
		}
		return true
	}, "the key partitions were not split in three: %+v, %+v, %+v", hs[0].claimer.Ownership(), hs[1].claimer.Ownership(), hs[2].claimer.Ownership())
	t.Logf("3 relays drained %d events over %d aggregates in %s (%.0f events/s), published %v", n, aggregates, drained.Round(time.Millisecond), n/drained.Seconds(), shares)

	requireTopicOrder(t, db, k, topic, n)
}

// requireTopicOrder reads topic until n distinct events arrived and
// fails unless each aggregate's events appear in the table's seq order.
func requireTopicOrder(t *testing.T, db *testenv.TestDB, k *testenv.TestKafka, topic string, n int) {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), "SELECT id::text, aggregate_id FROM outbox ORDER BY seq")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{}
	for rows.Next() {
		var id, agg string
		if err := rows.Scan(&id, &agg); err != nil {
			t.Fatal(err)
		}
		want[agg] = append(want[agg], id)
	}
	rows.Close()
	recs := k.Consume(t, topic, n, time.Minute)
	got, dups := firstAppearances(recs)
	if len(recs)-dups != n {
		t.Fatalf("%d distinct events on the topic, want %d", len(recs)-dups, n)
	}
	for agg, ids := range want {
		if fmt.Sprint(got[agg]) != fmt.Sprint(ids) {
			t.Fatalf("aggregate %s out of order", agg)
		}
	}
}

// Three relays whose fallback poll never fires (an hour) relay every event
// of a writer that names its events' key partitions (WakeupEveryTx), while
// one of them stops and another joins: a notification wakes only the
// owner of its partitions (the others count it as ignored), and every
// change of owners wakes every relay (sql/membership.sql), so that the
// partitions of the relay that left and those given to the one that
// joined are claimed at once, without a poll. Order holds per aggregate.
func TestNotificationsWakeOnlyTheOwnerAndOwnershipMovesWithoutAPoll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, k := testenv.MigratedDB(t), testenv.Kafka(t)
	topic := k.Topic(t, 6)
	o := func(id string) opts {
		return opts{relay: relay.Config{PollInterval: time.Hour}, lease: lease.Config{RelayID: id}}
	}
	hs := []*harness{startRelay(t, db, k, topic, o("r0")), startRelay(t, db, k, topic, o("r1")), startRelay(t, db, k, topic, o("r2"))}
	members := func(n int, hs ...*harness) func() bool {
		return func() bool {
			for _, h := range hs {
				if own := h.claimer.Ownership(); own.Members != n || own.Releasing > 0 {
					return false
				}
			}
			return true
		}
	}
	// Each relay claims at its start and rebalances at each change, woken
	// by the others' joins.
	testenv.Eventually(t, time.Minute, members(3, hs...), "the three relays did not all join")

	w := writer(t, db, outbox.WakeupEveryTx)
	stop := make(chan struct{})
	wrote := make(chan int)
	go func() {
		n := 0
		defer func() { wrote <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			tx, err := db.Pool.Begin(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			if err := w.Add(ctx, tx, event(fmt.Sprint("agg-", n%60), n)); err != nil {
				_ = tx.Rollback(ctx)
				t.Error(err)
				return
			}
			if err := tx.Commit(ctx); err != nil {
				t.Error(err)
				return
			}
			n++
			time.Sleep(2 * time.Millisecond)
		}
	}()
	published := func(h *harness, more int64) func() bool {
		base := h.relay.Stats().Published
		return func() bool { return h.relay.Stats().Published >= base+more }
	}
	// Each step waits for progress of the relays concerned, not for time.
	for _, h := range hs {
		testenv.Eventually(t, time.Minute, published(h, 20), "relay %s published nothing of the writer's events", h.claimer.Member())
	}
	hs[1].stop() // gives its partitions back
	testenv.Eventually(t, time.Minute, members(2, hs[0], hs[2]), "r1's partitions were not taken over")
	for _, h := range []*harness{hs[0], hs[2]} {
		testenv.Eventually(t, time.Minute, published(h, 50), "relay %s stalled after r1 left", h.claimer.Member())
	}
	joined := startRelay(t, db, k, topic, o("r3"))
	testenv.Eventually(t, time.Minute, members(3, hs[0], hs[2], joined), "r3 did not get its share")
	testenv.Eventually(t, time.Minute, published(joined, 20), "r3 published nothing")
	close(stop)
	n := <-wrote
	if t.Failed() {
		return
	}
	testenv.Eventually(t, time.Minute, func() bool { return unpublished(t, db) == 0 }, "events left unpublished with the poll off: a notification did not reach the owner")
	for _, h := range []*harness{hs[0], hs[2], joined} {
		if h.listener.Ignored() == 0 {
			t.Errorf("relay %s ignored no notification of %d: every notification woke every relay", h.claimer.Member(), h.listener.Notifications())
		}
	}

	requireTopicOrder(t, db, k, topic, n)
	t.Logf("%d events; notifications received/ignored: r0 %d/%d, r2 %d/%d, r3 %d/%d", n, hs[0].listener.Notifications(), hs[0].listener.Ignored(),
		hs[2].listener.Notifications(), hs[2].listener.Ignored(), joined.listener.Notifications(), joined.listener.Ignored())
}

// Three relays with notifications take turns at the fallback poll. Idle,
// they poll the table about once per poll interval between them, not
// once each: fifteen polls take at least fourteen intervals, and each
// relay runs some of them. Events written without a notification (plain
// SQL without pg_notify) are all relayed, in order: the relay whose turn
// it is claims its own and wakes the owners of the others
// (claim.Claimer.PollShared), which count that wake-up as a poll's.
func TestRelaysTakeTurnsAtThePoll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, k := testenv.MigratedDB(t), testenv.Kafka(t)
	topic := k.Topic(t, 6)
	const poll = 200 * time.Millisecond
	var hs []*harness
	for i := range 3 {
		hs = append(hs, startRelay(t, db, k, topic, opts{relay: relay.Config{PollInterval: poll}, lease: lease.Config{RelayID: fmt.Sprint("r", i)}}))
	}
	testenv.Eventually(t, time.Minute, func() bool {
		for _, h := range hs {
			if o := h.claimer.Ownership(); o.Members != 3 || o.Releasing > 0 {
				return false
			}
		}
		return true
	}, "the three relays did not all join")

	polls := func() (sum int64, each []int64) {
		for _, h := range hs {
			p := h.relay.Stats().WakePoll
			sum, each = sum+p, append(each, p)
		}
		return sum, each
	}
	sum0, each0 := polls()
	began := time.Now()
	const want = 15
	testenv.Eventually(t, time.Minute, func() bool { s, _ := polls(); return s-sum0 >= want }, "the idle relays did not poll")
	took := time.Since(began)
	_, each := polls()
	t.Logf("%d polls of 3 idle relays took %s (poll interval %s); per relay %v", want, took.Round(time.Millisecond), poll, []int64{each[0] - each0[0], each[1] - each0[1], each[2] - each0[2]})
	if took < (want-1)*poll {
		t.Errorf("%d polls took %s, less than %d poll intervals: the relays poll each for itself", want, took, want-1)
	}
	for i := range hs {
		if each[i] == each0[i] {
			t.Errorf("relay r%d took no turn at the poll", i)
		}
	}

	const n = 300
	for i := range n {
		if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload) VALUES (gen_random_uuid(), $1, 't', jsonb_build_object('n', $2::int))`,
			fmt.Sprint("agg-", i%60), i); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, time.Minute, func() bool { return unpublished(t, db) == 0 }, "events written without a notification were not all relayed")
	woken := int64(0)
	for _, h := range hs {
		_, p := h.listener.Wakeups()
		woken += p
		if h.relay.Stats().Published == 0 {
			t.Errorf("relay %s published nothing", h.claimer.Member())
		}
	}
	if woken == 0 {
		t.Error("no relay was woken by another's poll")
	}
	requireTopicOrder(t, db, k, topic, n)
}

// A relay without notifications (NoNotify) still takes its turns at the
// poll and wakes the owners of what it finds: beside a listening relay,
// its shared polls are the only source of the "poll:" wake-ups the
// listening relay receives (a relay's own polls never name its own
// partitions). Events written without a notification in the listening
// relay's partitions are all relayed, in order.
func TestARelayWithoutNotificationsTakesItsTurns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, k := testenv.MigratedDB(t), testenv.Kafka(t)
	topic := k.Topic(t, 6)
	const poll = 200 * time.Millisecond
	listening := startRelay(t, db, k, topic, opts{relay: relay.Config{PollInterval: poll}, lease: lease.Config{RelayID: "listening"}})
	deaf := startRelay(t, db, k, topic, opts{noNotify: true, relay: relay.Config{PollInterval: poll}, lease: lease.Config{RelayID: "deaf"}})
	testenv.Eventually(t, time.Minute, func() bool {
		for _, h := range []*harness{listening, deaf} {
			if o := h.claimer.Ownership(); o.Members != 2 || o.Releasing > 0 {
				return false
			}
		}
		return true
	}, "the two relays did not both join")
	var aggs []string
	rows, err := db.Pool.Query(ctx, `SELECT 'agg-' || g FROM generate_series(0, 999) g
WHERE outbox_key_partition('agg-' || g) IN (SELECT partition FROM outbox_partitions WHERE owner = $1) LIMIT 20`, listening.claimer.Member())
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var a string
		if err := rows.Scan(&a); err != nil {
			t.Fatal(err)
		}
		aggs = append(aggs, a)
	}
	if rows.Err() != nil || len(aggs) == 0 {
		t.Fatalf("no aggregate of the listening relay's partitions: %v", rows.Err())
	}
	n := 0
	testenv.Eventually(t, time.Minute, func() bool {
		for range 10 {
			if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload) VALUES (gen_random_uuid(), $1, 't', jsonb_build_object('n', $2::int))`,
				aggs[n%len(aggs)], n); err != nil {
				t.Fatal(err)
			}
			n++
		}
		_, polls := listening.listener.Wakeups()
		return polls > 0
	}, "the relay without notifications never woke the listening relay with a shared poll")
	testenv.Eventually(t, time.Minute, func() bool { return unpublished(t, db) == 0 }, "events written without a notification were not all relayed")
	requireTopicOrder(t, db, k, topic, n)
}
