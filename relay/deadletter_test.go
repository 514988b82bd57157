package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/lease"
	"github.com/pgoutbox/outbox/relay"
)

func deadLetterScenario(t *testing.T, mode relay.DeadLetterMode) (*testenv.TestDB, *testenv.TestKafka, string, []outbox.Event, *harness) {
	t.Helper()
	db := testenv.MigratedDB(t)
	// A broker whose message.max.bytes (4000) is below our write limit.
	k := testenv.KafkaFake(t, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "4000"}))
	topic := k.Topic(t, 1)
	big := json.RawMessage(fmt.Sprintf(`{"blob":%q}`, strings.Repeat("x", 6000)))
	evs := []outbox.Event{
		event("A", 1),
		{ID: outbox.NewID(), AggregateID: "A", Type: "test.big", Payload: big},
		event("A", 3),
		event("B", 1),
		event("B", 2),
	}
	addTx(t, db, nil, evs...)
	h := startRelay(t, db, k, topic, opts{relay: relay.Config{OnDeadLetter: mode, RetryMin: 50 * time.Millisecond}})
	return db, k, topic, evs, h
}

func eventIDs(recs []testenv.Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.Headers["event_id"])
	}
	return out
}

func TestPoisonEventIsDeadLetteredAndHoldsItsAggregate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, k, topic, evs, h := deadLetterScenario(t, relay.DeadLetterHold)
	testenv.Eventually(t, 20*time.Second, func() bool { return h.relay.Stats().DeadLettered == 1 }, "the oversized event was not dead-lettered")
	var dead *time.Time
	var attempts int
	var lastErr string
	if err := db.Pool.QueryRow(ctx, "SELECT dead_lettered_at, attempts, last_error FROM outbox WHERE id = $1", evs[1].ID).Scan(&dead, &attempts, &lastErr); err != nil {
		t.Fatal(err)
	}
	if dead == nil || attempts != 1 || !strings.Contains(strings.ToLower(lastErr), "too large") {
		t.Fatalf("dead letter: dead_lettered_at=%v attempts=%d last_error=%q", dead, attempts, lastErr)
	}
	// A1, B1, B2 go out; A2 is parked and A3 held behind it.
	recs := k.Consume(t, topic, 3, 15*time.Second)
	want := []string{evs[0].ID.String(), evs[3].ID.String(), evs[4].ID.String()}
	if got := eventIDs(recs); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("published %v, want %v", got, want)
	}
	var heldPublished *time.Time
	if err := db.Pool.QueryRow(ctx, "SELECT published_at FROM outbox WHERE id = $1", evs[2].ID).Scan(&heldPublished); err != nil || heldPublished != nil {
		t.Fatalf("A3 behind the dead letter: published_at=%v err=%v, want held", heldPublished, err)
	}
	// The cause is fixed (a smaller payload), then requeued: A2 and A3 follow
	// in order.
	if _, err := db.Pool.Exec(ctx, `UPDATE outbox SET payload = '{"blob":"small now"}' WHERE id = $1`, evs[1].ID); err != nil {
		t.Fatal(err)
	}
	claimer, err := claim.New(db.Pool, lease.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := claimer.Requeue(ctx, []string{evs[1].ID.String()}); err != nil || n != 1 {
		t.Fatalf("requeue: %d %v", n, err)
	}
	recs = k.Consume(t, topic, 5, 15*time.Second)
	got, dups := firstAppearances(recs)
	if dups != 0 || fmt.Sprint(got["A"]) != fmt.Sprint([]string{evs[0].ID.String(), evs[1].ID.String(), evs[2].ID.String()}) {
		t.Fatalf("after requeue aggregate A = %v (dups %d), want A1, A2, A3", got["A"], dups)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return unpublished(t, db) == 0 }, "not all marked after requeue")
}

func TestPoisonEventWithSkipLetsItsAggregateGoOn(t *testing.T) {
	t.Parallel()
	db, k, topic, evs, h := deadLetterScenario(t, relay.DeadLetterSkip)
	testenv.Eventually(t, 20*time.Second, func() bool { return h.relay.Stats().DeadLettered == 1 }, "the oversized event was not dead-lettered")
	recs := k.Consume(t, topic, 4, 15*time.Second)
	got, _ := firstAppearances(recs)
	if fmt.Sprint(got["A"]) != fmt.Sprint([]string{evs[0].ID.String(), evs[2].ID.String()}) || len(got["B"]) != 2 {
		t.Fatalf("with skip: published %v, want A1, A3 and B1, B2", got)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return unpublished(t, db) == 1 }, "want only the dead letter unpublished")
}

// An event over the publisher's own size limit (a plain-SQL writer skipped
// the writer's check) is dead-lettered at once, not retried.
func TestEventOverThePublisherLimitIsDeadLetteredAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, k := testenv.MigratedDB(t), testenv.Kafka(t)
	topic := k.Topic(t, 1)
	id := outbox.NewID()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload) VALUES ($1, 'big', 't', jsonb_build_object('blob', repeat('x', 2000000)))`, id); err != nil {
		t.Fatal(err)
	}
	h := startRelay(t, db, k, topic, opts{})
	testenv.Eventually(t, 20*time.Second, func() bool { return h.relay.Stats().DeadLettered == 1 }, "not dead-lettered")
	var attempts int
	var lastErr string
	if err := db.Pool.QueryRow(ctx, "SELECT attempts, last_error FROM outbox WHERE id = $1 AND dead_lettered_at IS NOT NULL", id).Scan(&attempts, &lastErr); err != nil {
		t.Fatal(err)
	}
	if attempts != 1 || !strings.Contains(lastErr, "over the publisher's limit") {
		t.Fatalf("attempts %d, last_error %q", attempts, lastErr)
	}
}

// An event whose payload is larger than the claim's byte bound
// (lease.Config.MaxBatchBytes) is dead-lettered at once without being
// read, naming the bound; the events around it, before and after in its
// claim, are published.
func TestEventOverTheClaimsByteBoundIsDeadLetteredUnread(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, k := testenv.MigratedDB(t), testenv.Kafka(t)
	topic := k.Topic(t, 1)
	small := []outbox.Event{event("A", 1), event("B", 1)}
	addTx(t, db, nil, small[0])
	id := outbox.NewID()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload) VALUES ($1, 'big', 't', jsonb_build_object('blob', repeat('x', 300000)))`, id); err != nil {
		t.Fatal(err)
	}
	addTx(t, db, nil, small[1])
	h := startRelay(t, db, k, topic, opts{lease: lease.Config{MaxBatchBytes: 200000}})
	testenv.Eventually(t, 20*time.Second, func() bool { return h.relay.Stats().DeadLettered == 1 && unpublished(t, db) == 1 }, "not dead-lettered, or the other events not published")
	var lastErr string
	if err := db.Pool.QueryRow(ctx, "SELECT last_error FROM outbox WHERE id = $1 AND dead_lettered_at IS NOT NULL", id).Scan(&lastErr); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(lastErr, "larger than the claim's byte bound") || !strings.Contains(lastErr, "MaxBatchBytes 200000") {
		t.Fatalf("last_error %q, want it to name the byte bound", lastErr)
	}
	recs := k.Consume(t, topic, 2, 15*time.Second)
	if got, want := fmt.Sprint(eventIDs(recs)), fmt.Sprint([]string{small[0].ID.String(), small[1].ID.String()}); got != want {
		t.Fatalf("published %s, want %s", got, want)
	}
}

// A backlog of payloads whose claims stop at the byte bound, each with a
// few rows, drains as fast as full batches do: a claim cut short by the
// bound is followed at once by the next (claim.Batch.More), not by the
// poll interval.
func TestBacklogInByteBoundClaimsDrainsWithoutPolling(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, k := testenv.MigratedDB(t), testenv.Kafka(t)
	topic := k.Topic(t, 2)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload)
SELECT gen_random_uuid(), 'agg-' || (g % 7), 't', jsonb_build_object('n', g, 'pad', repeat('x', 10000)) FROM generate_series(1, 300) g`); err != nil {
		t.Fatal(err)
	}
	// 3 rows per claim: 100 claims. With no notification and a poll
	// interval longer than the wait, only claims that follow claims can
	// drain it; WakePoll below proves no poll helped, however long a
	// loaded machine takes.
	h := startRelay(t, db, k, topic, opts{lease: lease.Config{MaxBatchBytes: 25000}, relay: relay.Config{PollInterval: 10 * time.Minute}, noNotify: true})
	testenv.Eventually(t, 2*time.Minute, func() bool { return unpublished(t, db) == 0 }, "the backlog did not drain without polls")
	if st := h.relay.Stats(); st.Claims < 100 || st.WakePoll > 1 {
		t.Fatalf("stats %+v: want at least 100 claims, at most one by the poll", st)
	}
}

// TestEventAtTheWritersLimitIsPublished: an event the writer accepts with
// its default limit is published by a relay with default publisher settings
// to a broker with Kafka's default message.max.bytes (kfake's too), and one
// a byte larger is refused by the writer; the payload's size counts as
// PostgreSQL prints it back from jsonb, which here is larger than written.
func TestEventAtTheWritersLimitIsPublished(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, k := testenv.MigratedDB(t), testenv.Kafka(t)
	topic := k.Topic(t, 1)
	h := startRelay(t, db, k, topic, opts{})
	id := outbox.NewID()
	ev := func(n int) outbox.Event {
		// An array of 1s: 2 bytes an element as written ("1,"), 3 as
		// stored ("1, ").
		elems := strings.Repeat("1,", n) + "1"
		return outbox.Event{ID: id, AggregateID: "big", Type: "t", Payload: json.RawMessage("[" + elems + "]")}
	}
	// Key "big" 3 bytes, headers: event_id 8+36, event_type 10+1,
	// aggregate_id 12+3: 73; value 3n+3 bytes.
	n := (outbox.DefaultMaxRecordBytes - 73 - 3) / 3
	over := ev(n + 1)
	if err := outbox.Add(ctx, db.Pool, over); !outbox.IsValidationError(err) {
		t.Fatalf("Add of a record of %d bytes: err = %v, want a ValidationError", 73+3*(n+1)+3, err)
	}
	at := ev(n)
	if len(at.Payload) >= outbox.DefaultMaxRecordBytes*2/3+10 {
		t.Fatalf("test payload %d bytes as written", len(at.Payload))
	}
	if err := outbox.Add(ctx, db.Pool, at); err != nil {
		t.Fatal(err)
	}
	recs := k.Consume(t, topic, 1, 20*time.Second)
	if len(recs) != 1 || recs[0].Headers["event_id"] != id.String() {
		t.Fatalf("consumed %d records", len(recs))
	}
	if size := len(recs[0].Value); size != 3*n+3 {
		t.Fatalf("value of %d bytes, want %d", size, 3*n+3)
	}
	// The relay counts the publish once Kafka's answer is back, which may
	// be after the record can be consumed.
	testenv.Eventually(t, 20*time.Second, func() bool { return h.relay.Stats().Published >= 1 }, "the publish was not counted: stats %+v", h.relay.Stats())
	if s := h.relay.Stats(); s.DeadLettered != 0 || s.Published != 1 {
		t.Fatalf("relay stats %+v", s)
	}
}
