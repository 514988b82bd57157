package relay_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/relay"
)

// COPY into the outbox evaluates the identity default for every buffered
// row before its first multi-insert gives the transaction an xid: the
// transaction holds hundreds of seqs with no xid. Reviewers found two
// defects with it: the claim floor passed such rows and they were never
// published (fixed first by a rescan from seq 0 every 10 s), and, when the
// COPY committed, claims starting at the floor published its later rows,
// and a later event of the same aggregate, before its earlier rows (fixed in
// lease.advance, which now waits for every transaction running when a
// marker is taken, xid or not).

// startSlowCopy starts the relay of a test (poll-only, polling every 50ms)
// and returns it with a function that COPYs n events of aggregate agg
// (payload {"n": i}) in one transaction. The COPY source stalls once the
// server has taken the seqs of all n buffered rows (no xid yet), until the
// relay has claimed 10 more times (and moved its floor), then ends.
func startSlowCopy(t *testing.T, db *testenv.TestDB, k *testenv.TestKafka, topic, agg string, n int) (*harness, func()) {
	t.Helper()
	h := startRelay(t, db, k, topic, opts{noNotify: true, relay: relay.Config{PollInterval: 50 * time.Millisecond}})
	return h, func() {
		t.Helper()
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, db.ConnString)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		pr, pw := io.Pipe()
		go func() {
			for i := 0; i < n; i++ {
				fmt.Fprintf(pw, "%s\t%s\tt\t{\"n\":%d}\n", outbox.NewID(), agg, i)
			}
			// Not testenv.Eventually: this is not the test's goroutine.
			waitFor := func(cond func() bool) bool {
				for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
					if time.Now().After(deadline) {
						return false
					}
				}
				return true
			}
			if !waitFor(func() bool {
				var last *int64
				_ = db.Pool.QueryRow(ctx, "SELECT pg_sequence_last_value(pg_get_serial_sequence('outbox', 'seq'))").Scan(&last)
				return last != nil && *last >= int64(n)
			}) {
				pw.CloseWithError(errors.New("the COPY did not take its seqs within 10s"))
				return
			}
			claims := h.relay.Stats().Claims
			if !waitFor(func() bool { return h.relay.Stats().Claims >= claims+10 }) {
				pw.CloseWithError(errors.New("the relay did not claim within 10s"))
				return
			}
			pw.Close()
		}()
		tag, err := conn.PgConn().CopyFrom(ctx, pr, "COPY outbox (id, aggregate_id, event_type, payload) FROM STDIN")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("COPY %d rows committed", tag.RowsAffected())
	}
}

func TestRowsCommittedBelowTheFloorArePublished(t *testing.T) {
	t.Parallel()
	db, k := testenv.MigratedDB(t), testenv.Kafka(t)
	h, slowCopy := startSlowCopy(t, db, k, k.Topic(t, 1), "agg-copy", 500)
	slowCopy()
	testenv.Eventually(t, 30*time.Second, func() bool { return unpublished(t, db) == 0 },
		"COPY rows left unpublished (stats %+v)", h.relay.Stats())
}

func TestRowsCommittedBelowTheFloorKeepTheirAggregateOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, k := testenv.MigratedDB(t), testenv.Kafka(t)
	topic := k.Topic(t, 1)
	const n = 900
	h, slowCopy := startSlowCopy(t, db, k, topic, "agg-x", n)
	slowCopy()
	// The next event of the same aggregate, committed after the COPY.
	if err := outbox.Add(ctx, db.Pool, outbox.Event{ID: outbox.NewID(), AggregateID: "agg-x", Type: "t", Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))}); err != nil {
		t.Fatal(err)
	}
	recs := k.Consume(t, topic, n+1, 30*time.Second)
	t.Logf("relay stats %+v", h.relay.Stats())
	last := -1
	inversions := 0
	var first []int
	for _, r := range recs {
		var p struct{ N int }
		if err := json.Unmarshal(r.Value, &p); err != nil {
			t.Fatal(err)
		}
		if len(first) < 5 {
			first = append(first, p.N)
		}
		if p.N < last {
			if inversions == 0 {
				t.Errorf("agg-x: event n=%d (lower seq) published after n=%d", p.N, last)
			}
			inversions++
		}
		last = p.N
	}
	t.Logf("%d records; first published n=%v", len(recs), first)
	if inversions > 0 {
		t.Fatalf("%d order inversions within one aggregate", inversions)
	}
}

// After ALTER SEQUENCE outbox_seq_seq RESTART WITH 1 below the published
// rows (issue 20: a logical-replication cutover; each new event was
// published 46.8-49.0 s after its insert, by the once-a-minute rescan), a
// new event is published at normal latency: the relay's claim floor drops
// at its next advance, and the claim that finds the restart claims again
// at once.
func TestEventAfterASequenceRestartIsPublishedAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, k := testenv.MigratedDB(t), testenv.Kafka(t)
	topic := k.Topic(t, 1)
	h := startRelay(t, db, k, topic, opts{})
	w := writer(t, db, outbox.WakeupEveryTx)
	var evs []outbox.Event
	for i := range 300 {
		evs = append(evs, event(fmt.Sprint("agg-", i%10), i))
	}
	addTx(t, db, w, evs...)
	testenv.Eventually(t, 15*time.Second, func() bool { return unpublished(t, db) == 0 && h.claimer.Floor() > 300 },
		"the 300 events were not published, or the floor did not pass them (floor %d)", h.claimer.Floor())
	from := k.EndOffsets(t, topic)
	if _, err := db.Pool.Exec(ctx, `DO $$ BEGIN EXECUTE format('ALTER SEQUENCE %s RESTART WITH 1', pg_get_serial_sequence('outbox', 'seq')); END $$`); err != nil {
		t.Fatal(err)
	}
	// Before the fix each event waited for the rescan from seq 0, once a
	// minute (46.8-49.0 s, docs/database.md); normal latency is
	// milliseconds. The bound is a third of the rescan period: a loaded
	// machine's Kafka round trip fits, and of three events in a row at most
	// one could meet a rescan within it.
	const atOnce = 20 * time.Second
	for i := range 3 {
		ev := event("agg-0", 1000+i)
		began := time.Now()
		addTx(t, db, w, ev)
		recs := k.ConsumeFrom(t, topic, from, i+1, atOnce)
		if len(recs) < i+1 {
			t.Fatalf("event %d after the restart not on Kafka %s after its commit (the rescan from seq 0 runs once a minute; floor %d, restarts %d, stats %+v)",
				i, atOnce, h.claimer.Floor(), h.claimer.Restarts(), h.relay.Stats())
		}
		if got := recs[len(recs)-1].Headers["event_id"]; got != ev.ID.String() {
			t.Fatalf("event %d after the restart: got %s, want %s", i, got, ev.ID)
		}
		t.Logf("event %d after the restart published %s after its commit (floor %d, restarts %d)",
			i, time.Since(began).Round(time.Millisecond), h.claimer.Floor(), h.claimer.Restarts())
	}
	// The claims found the events from seq 0 before the floor moved; the
	// floor itself drops at the Claimer's next advance.
	testenv.Eventually(t, 10*time.Second, func() bool { return h.claimer.Restarts() >= 1 && h.claimer.Floor() < 300 },
		"the claimer did not drop its floor after the restart (floor %d, restarts %d)", h.claimer.Floor(), h.claimer.Restarts())
	if h.claimer.Restarts() != 1 {
		t.Errorf("the claimer counted %d restarts of the sequence, want 1", h.claimer.Restarts())
	}
}
