package checker

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestFromRealSystems exercises ExpectedFromTable and ObserveTopic: rows of
// a committed and a rolled-back transaction, records produced by hand
// (one duplicate, one phantom, one of a rolled-back event).
func TestFromRealSystems(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	topic := k.Topic(t, 3)

	var committed []outbox.Event
	for i := 0; i < 30; i++ {
		committed = append(committed, outbox.Event{ID: outbox.NewID(), AggregateID: fmt.Sprint("a", i%4), Type: "t",
			Payload: json.RawMessage(fmt.Sprintf(`{"i": %d}`, i))})
	}
	committed = append(committed, outbox.Event{ID: outbox.NewID(), AggregateID: "a0", Type: "t", Payload: json.RawMessage(`null`)})
	if err := outbox.Add(ctx, db.Pool, committed...); err != nil {
		t.Fatal(err)
	}
	rolledBack := outbox.Event{ID: outbox.NewID(), AggregateID: "a1", Type: "t", Payload: json.RawMessage(`{}`)}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := outbox.Add(ctx, tx, rolledBack); err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback(ctx)

	exp, err := ExpectedFromTable(ctx, db.Pool, "outbox")
	if err != nil {
		t.Fatal(err)
	}
	if len(exp) != len(committed) {
		t.Fatalf("%d rows, want %d", len(exp), len(committed))
	}
	for i := range exp {
		if exp[i].ID != committed[i].ID || (i > 0 && exp[i].Seq <= exp[i-1].Seq) {
			t.Fatalf("row %d: %+v, want event %s in seq order", i, exp[i], committed[i].ID)
		}
	}
	if exp[len(exp)-1].Payload == nil || string(exp[len(exp)-1].Payload) != "null" {
		t.Fatalf("jsonb null payload read as %q", exp[len(exp)-1].Payload)
	}

	cl := k.Client(t, kgo.DefaultProduceTopic(topic))
	rec := func(e outbox.Event) *kgo.Record {
		return &kgo.Record{Key: []byte(e.AggregateID), Value: e.Payload,
			Headers: []kgo.RecordHeader{{Key: "event_id", Value: []byte(e.ID.String())}}}
	}
	var recs []*kgo.Record
	for _, e := range committed {
		recs = append(recs, rec(e))
	}
	recs = append(recs, rec(committed[3]), rec(rolledBack),
		rec(outbox.Event{ID: outbox.NewID(), AggregateID: "zz", Payload: json.RawMessage(`1`)}))
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	obs, err := ObserveTopic(ctx, k.Brokers, topic, len(exp), 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(obs) != len(recs) {
		t.Fatalf("observed %d records, want all %d (duplicates and phantoms included)", len(obs), len(recs))
	}
	r := Check(exp, obs)
	if r.Lost != 0 || r.Delivered != len(exp) || r.Duplicates != 1 || r.Phantoms != 2 || r.OrderViolations != 0 || r.PayloadMismatches != 0 {
		t.Fatalf("report: %v", r)
	}

	// Too few on the topic: ObserveTopic returns at the timeout, not an
	// error, with every record there. The timeout passes in full, and must
	// leave a new consumer time to read them on a loaded machine.
	obs, err = ObserveTopic(ctx, k.Brokers, topic, len(recs)+5, 10*time.Second)
	if err != nil || len(obs) != len(recs) {
		t.Fatalf("timeout: %d records, %v", len(obs), err)
	}
}
