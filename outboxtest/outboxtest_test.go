package outboxtest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/lease"
	"github.com/pgoutbox/outbox/notify"
	"github.com/pgoutbox/outbox/outboxtest"
	"github.com/pgoutbox/outbox/relay"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// fatalTB is t, except that Fatalf records its message and ends the
// goroutine, as t.Fatalf would: the failures of the Require functions are
// what these tests check.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// fatalOf runs fn with a fatalTB and returns what it failed with ("" if
// it did not).
func fatalOf(t *testing.T, fn func(tb testing.TB)) string {
	ft := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(ft)
	}()
	<-done
	return ft.msg
}

type captured struct {
	Amount   string `json:"amount"`
	Currency string `json:"currency"`
}

func TestRequireAddedDecodesThePayload(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := outboxtest.Schema(t, testenv.DB(t).ConnString)
	id := outbox.NewID()
	if err := outbox.Add(ctx, pool,
		outbox.Event{ID: id, AggregateID: "pay_1", Type: "payment.captured", Payload: json.RawMessage(`{"amount":"12.50","currency":"EUR"}`)},
		outbox.Event{AggregateID: "pay_2", Type: "payment.refunded", Payload: json.RawMessage(`{"amount":"3.00"}`), Headers: map[string]string{"tenant": "acme"}, Topic: "refunds"},
	); err != nil {
		t.Fatal(err)
	}
	ev := outboxtest.RequireAdded[captured](t, pool, outboxtest.Expect{Type: "payment.captured"})
	if ev.ID != id || ev.AggregateID != "pay_1" || ev.Payload != (captured{"12.50", "EUR"}) || ev.Topic != "" || ev.PublishedAt != nil || ev.CreatedAt.IsZero() {
		t.Errorf("RequireAdded: %+v", ev)
	}
	if string(ev.RawPayload) != `{"amount": "12.50", "currency": "EUR"}` {
		t.Errorf("RawPayload %s, want the payload as jsonb prints it", ev.RawPayload)
	}
	ref := outboxtest.RequireAdded[map[string]string](t, pool, outboxtest.Expect{Headers: map[string]string{"tenant": "acme"}, Topic: "refunds", AggregateID: "pay_2"})
	if ref.Type != "payment.refunded" || ref.Payload["amount"] != "3.00" || ref.Headers["tenant"] != "acme" {
		t.Errorf("RequireAdded by headers, topic and aggregate: %+v", ref)
	}
	outboxtest.RequireNotAdded(t, pool, outboxtest.Expect{Type: "payment.captured", AggregateID: "pay_2"})

	for _, tc := range []struct {
		name string
		fn   func(tb testing.TB)
		want []string
	}{
		{"none matches", func(tb testing.TB) {
			outboxtest.RequireAdded[captured](tb, pool, outboxtest.Expect{Type: "payment.failed"})
		}, []string{`want 1 event matching type "payment.failed", found 0; the table holds 2`, `seq 1 type "payment.captured" aggregate "pay_1"`, `topic "refunds" headers map[tenant:acme]`}},
		{"two match", func(tb testing.TB) {
			outboxtest.RequireAdded[captured](tb, pool, outboxtest.Expect{})
		}, []string{"want 1 event matching any event, found 2"}},
		{"payload of another shape", func(tb testing.TB) {
			outboxtest.RequireAdded[[]int](tb, pool, outboxtest.Expect{AggregateID: "pay_1"})
		}, []string{"does not decode into []int", `payload {"amount": "12.50"`}},
		{"not added, but it was", func(tb testing.TB) {
			outboxtest.RequireNotAdded(tb, pool, outboxtest.Expect{Type: "payment.captured"})
		}, []string{`want no event matching type "payment.captured", found 1: seq 1`}},
		{"no such table", func(tb testing.TB) {
			outboxtest.RequireNotAdded(tb, pool, outboxtest.Expect{Table: "events"})
		}, []string{"read events:", "42P01"}},
	} {
		msg := fatalOf(t, tc.fn)
		for _, w := range tc.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: failed with %q; want it to contain %q", tc.name, msg, w)
			}
		}
	}
}

func TestRequireAddedTxSeesTheTransactionsEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := outboxtest.Schema(t, testenv.DB(t).ConnString)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := outbox.Add(ctx, tx, outbox.Event{AggregateID: "order-7", Type: "order.placed", Payload: json.RawMessage(`{"lines":2}`)}); err != nil {
		t.Fatal(err)
	}
	ev := outboxtest.RequireAddedTx[struct{ Lines int }](t, tx, outboxtest.Expect{Type: "order.placed"})
	if ev.Payload.Lines != 2 || ev.AggregateID != "order-7" {
		t.Errorf("RequireAddedTx: %+v", ev)
	}
	outboxtest.RequireNotAdded(t, pool, outboxtest.Expect{Type: "order.placed"}) // not committed
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	outboxtest.RequireNotAdded(t, pool, outboxtest.Expect{})
}

// Each Schema is a schema of its own, with the table; it is dropped when
// its test ends.
func TestSchemaIsIsolatedAndDropped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := testenv.DB(t)
	var first string
	t.Run("first", func(t *testing.T) {
		a, b := outboxtest.Schema(t, base.ConnString), outboxtest.Schema(t, base.ConnString)
		if err := a.QueryRow(ctx, "SELECT current_schema()").Scan(&first); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(first, "outboxtest_") {
			t.Errorf("schema %q, want outboxtest_...", first)
		}
		if err := outbox.Add(ctx, a, outbox.Event{AggregateID: "a", Type: "t", Payload: json.RawMessage(`1`)}); err != nil {
			t.Fatal(err)
		}
		outboxtest.RequireAdded[int](t, a, outboxtest.Expect{Type: "t"})
		outboxtest.RequireNotAdded(t, b, outboxtest.Expect{})
	})
	var n int
	if err := base.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", first).Scan(&n); err != nil || n != 0 {
		t.Fatalf("schema %s after its test: %d (%v), want dropped", first, n, err)
	}
	if msg := fatalOf(t, func(tb testing.TB) { outboxtest.Schema(tb, "") }); !strings.Contains(msg, "empty connection string") {
		t.Errorf("Schema with no connection string: %q", msg)
	}
}

// The recording publisher stands in for Kafka under relay.NewService: the
// relay claims, publishes to it and marks; while it fails, nothing is
// recorded or marked, and the event goes out once it works again.
func TestPublisherUnderNewService(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := outboxtest.Schema(t, testenv.DB(t).ConnString)
	pub := outboxtest.NewPublisher()
	svc, err := relay.NewService(pool, pub.ServiceConfig(relay.ServiceConfig{
		Relay:  relay.Config{Topic: "payments", RetryMin: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond},
		Notify: notify.Config{Channel: "outboxtest_publisher"},
	}), testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(rctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	w, err := outbox.NewWriter(outbox.WriterConfig{Channel: "outboxtest_publisher"})
	if err != nil {
		t.Fatal(err)
	}
	id := outbox.NewID()
	if err := w.Add(ctx, pool, outbox.Event{ID: id, AggregateID: "pay_1", Type: "payment.captured", Payload: json.RawMessage(`{"amount":"1.00"}`)}); err != nil {
		t.Fatal(err)
	}
	msgs := pub.Wait(t, 1, 20*time.Second)
	if got, _ := outboxtest.Header(msgs[0], "event_id"); len(msgs) != 1 || msgs[0].Topic != "payments" || string(msgs[0].Key) != "pay_1" || got != id.String() || string(msgs[0].Value) != `{"amount": "1.00"}` {
		t.Fatalf("published %+v", msgs)
	}
	testenv.Eventually(t, 20*time.Second, func() bool {
		return outboxtest.RequireAdded[any](t, pool, outboxtest.Expect{AggregateID: "pay_1"}).PublishedAt != nil
	}, "pay_1 not marked published")

	pub.Fail(errors.New("broker down"))
	calls := pub.Calls()
	if err := w.Add(ctx, pool, outbox.Event{AggregateID: "pay_2", Type: "payment.captured", Payload: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, func() bool { return pub.Calls() >= calls+2 }, "no retried publish of pay_2")
	if n := len(pub.Messages()); n != 1 {
		t.Fatalf("%d messages recorded while failing, want the 1 from before", n)
	}
	if ev := outboxtest.RequireAdded[any](t, pool, outboxtest.Expect{AggregateID: "pay_2"}); ev.PublishedAt != nil {
		t.Fatalf("pay_2 marked published while the publisher failed")
	}
	pub.Fail(nil)
	if msgs := pub.Wait(t, 2, 30*time.Second); string(msgs[1].Key) != "pay_2" {
		t.Fatalf("after the failure: %+v", msgs)
	}
}

// relay.New takes the recording publisher as it is.
func TestPublisherUnderRelayNew(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := outboxtest.Schema(t, testenv.DB(t).ConnString)
	claimer, err := claim.New(pool, lease.Config{})
	if err != nil {
		t.Fatal(err)
	}
	pub := outboxtest.NewPublisher()
	r, err := relay.New(relay.Config{Topic: "orders", PollInterval: 20 * time.Millisecond}, claimer, pub, nil, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	if err := outbox.Add(ctx, pool, outbox.Event{AggregateID: "o1", Type: "order.placed", Payload: json.RawMessage(`{}`)},
		outbox.Event{AggregateID: "o1", Type: "order.paid", Payload: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	msgs := pub.Wait(t, 2, 20*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	_ = claimer.Close(ctx)
	t1, _ := outboxtest.Header(msgs[0], "event_type")
	t2, _ := outboxtest.Header(msgs[1], "event_type")
	if len(msgs) != 2 || t1 != "order.placed" || t2 != "order.paid" || msgs[0].Topic != "orders" {
		t.Fatalf("published %+v; want order.placed then order.paid to orders", msgs)
	}
}
