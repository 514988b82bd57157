package relay_test

import (
	"testing"
	"time"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/relay"
)

// TestClaimWindowIsSparseWhileEveryEventIsNotified: at 10 events/s with a
// notification in every transaction that names the event's key partition
// (WakeupEveryTx), the relay claims once per notification, with no claim
// every ClaimWindowPoll for 25ms after a hit (make bench at 10/s before:
// 123 claims/s, 113 of them empty, 3.1 ms of database CPU per event), nor
// the sparse window's one claim at the window's end. Then an event committed without a notification
// right after a notified one is still found by the window's claim: the
// fallback poll is an hour here, so nothing else could find it.
func TestClaimWindowIsSparseWhileEveryEventIsNotified(t *testing.T) {
	t.Parallel()
	db, k := testenv.MigratedDB(t), testenv.Kafka(t)
	topic := k.Topic(t, 1)
	h := startRelay(t, db, k, topic, opts{relay: relay.Config{PollInterval: time.Hour}})
	notified := writer(t, db, outbox.WakeupEveryTx)
	const n = 20
	testenv.Eventually(t, 10*time.Second, func() bool { return h.relay.Stats().Claims >= 1 }, "no first claim")
	s0 := h.relay.Stats()
	for i := 0; i < n; i++ {
		addTx(t, db, notified, event("a", i))
		time.Sleep(100 * time.Millisecond) // the input: 10 events/s
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return unpublished(t, db) == 0 }, "notified events not published")
	s1 := h.relay.Stats()
	claims, empty, window := s1.Claims-s0.Claims, s1.EmptyClaims-s0.EmptyClaims, s1.WakeWindow-s0.WakeWindow
	t.Logf("%d notified events at 10/s: %d claims, %d empty, %d window wake-ups", n, claims, empty, window)
	if empty > 2*n {
		t.Errorf("%d empty claims for %d notified events, want at most 2 per event", empty, n)
	}
	// Every notification named the event's key partition: no claim
	// follows a hit (schedConfig.everyTx); one is a margin for a stray.
	if window > 1 {
		t.Errorf("%d window wake-ups for %d events whose notifications named their key partitions, want none", window, n)
	}

	// A debounced writer's event, then its next one 2 ms later, whose
	// notification the debounce drops. The window's claim finds the second
	// only if it commits within ClaimWindow of the first's claim, which a
	// loaded machine's commits can miss by far with the default 25ms: a
	// new (sparse) relay with a 2 s window finds it. (A hit woken by a
	// notification that names key partitions, an every-transaction
	// writer's, gets no such claim: TestSchedule.)
	h.stop()
	h = startRelay(t, db, k, topic, opts{relay: relay.Config{PollInterval: time.Hour, ClaimWindow: 2 * time.Second}})
	testenv.Eventually(t, 30*time.Second, func() bool { return h.relay.Stats().Claims >= 1 }, "no first claim")
	debounced, err := outbox.NewWriter(outbox.WriterConfig{Wakeup: outbox.WakeupDebounced, WakeupInterval: time.Minute, Channel: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	addTx(t, db, debounced, event("b", 0))
	time.Sleep(2 * time.Millisecond)
	addTx(t, db, debounced, event("b", 1))
	testenv.Eventually(t, 30*time.Second, func() bool { return unpublished(t, db) == 0 }, "the event without a notification was not found by the window's claim")
}

// TestClaimWindowCoversEveryHitWhileSparse: while the window is sparse,
// every claim that found events is still followed by a claim a window
// later. Input (found by a break test, with the default 25ms window and
// 20ms debounce): writer 1 commits A with a notification; 10 ms later
// writer 2 commits B with one; 18 ms after B, writer 2 commits C, whose
// notification its 20 ms debounce drops. A's window ends before C commits,
// so a window that ended ClaimWindow after the first hit left C to the
// fallback poll (an hour here: it was never published; with the default
// 500 ms poll it took 457-546 ms in 6 of 8 trials, against 1-3 ms before
// the sparse window). Here the window, the debounce and the gaps are 80
// times as long: at 25ms, C's commit had to land within 7 ms of its
// schedule, which a loaded machine's commits miss; now it has 560 ms.
func TestClaimWindowCoversEveryHitWhileSparse(t *testing.T) {
	t.Parallel()
	db, k := testenv.MigratedDB(t), testenv.Kafka(t)
	topic := k.Topic(t, 1)
	const scale = 80
	w1 := writer(t, db, outbox.WakeupEveryTx)
	w2, err := outbox.NewWriter(outbox.WriterConfig{Wakeup: outbox.WakeupDebounced, WakeupInterval: scale * 20 * time.Millisecond, Channel: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		// A new relay each time: it starts sparse (the window stays dense
		// for 10 s after an event found without a notification).
		h := startRelay(t, db, k, topic, opts{relay: relay.Config{PollInterval: time.Hour, ClaimWindow: scale * 25 * time.Millisecond}})
		testenv.Eventually(t, 30*time.Second, func() bool { return h.relay.Stats().Claims >= 1 }, "no first claim")
		t0 := time.Now()
		addTx(t, db, w1, event("a", i))
		time.Sleep(time.Until(t0.Add(scale * 10 * time.Millisecond)))
		tb := time.Now()
		addTx(t, db, w2, event("b", 2*i))
		time.Sleep(time.Until(tb.Add(scale * 18 * time.Millisecond)))
		addTx(t, db, w2, event("b", 2*i+1)) // no notification: the debounce drops it
		testenv.Eventually(t, 30*time.Second, func() bool { return unpublished(t, db) == 0 },
			"trial %d: the event without a notification was left to the fallback poll", i)
		h.stop()
	}
}
