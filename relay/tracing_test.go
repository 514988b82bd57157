package relay_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/relay"
)

// newTracing returns a tracer provider that keeps every ended span in
// memory (the SDK's SpanRecorder, a span processor; no exporter).
func newTracing(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, rec
}

// spansOf returns the spans recorded for the event with id, by name.
func spansOf(rec *tracetest.SpanRecorder, id string) map[string][]tracetest.SpanStub {
	out := map[string][]tracetest.SpanStub{}
	for _, s := range tracetest.SpanStubsFromReadOnlySpans(rec.Ended()) {
		if attrOf(s, "messaging.message.id") == id {
			out[s.Name] = append(out[s.Name], s)
		}
	}
	return out
}

func attrOf(s tracetest.SpanStub, key attribute.Key) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// waitSpans waits until the event with id has its outbox and send spans.
func waitSpans(t *testing.T, exp *tracetest.SpanRecorder, id, topic string) (waited, sent tracetest.SpanStub) {
	t.Helper()
	var got map[string][]tracetest.SpanStub
	testenv.Eventually(t, 20*time.Second, func() bool {
		got = spansOf(exp, id)
		return len(got["outbox "+topic]) > 0 && len(got["send "+topic]) > 0
	}, "no outbox and send spans for event %s", id)
	if len(got["outbox "+topic]) != 1 || len(got["send "+topic]) != 1 || len(got) != 2 {
		t.Fatalf("spans of event %s: %v, want one outbox %s and one send %s", id, got, topic, topic)
	}
	return got["outbox "+topic][0], got["send "+topic][0]
}

func checkAttrs(t *testing.T, s tracetest.SpanStub, want map[attribute.Key]string) {
	t.Helper()
	for k, v := range want {
		if got := attrOf(s, k); got != v {
			t.Errorf("span %q: %s = %q, want %q (attributes %v)", s.Name, k, got, v, s.Attributes)
		}
	}
}

// An event written under a span: the relay's spans for its time in the
// outbox and its publish are children of the writer's span, with the
// topic, the partition the broker stored it in, the event ID and the
// outcome; the outbox span starts at the row's created_at and ends where
// the publish starts. An event written without a span gets a trace of its
// own.
func TestTracingContinuesTheWritersTrace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, k := testenv.MigratedDB(t), testenv.Kafka(t)
	topic := k.Topic(t, 3)
	tp, exp := newTracing(t)

	app, writerSpan := tp.Tracer("app").Start(ctx, "capture payment")
	traced, untraced := event("pay_1", 1), event("pay_2", 1)
	w := writer(t, db, outbox.WakeupDebounced)
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Add(app, tx, traced); err != nil {
		t.Fatal(err)
	}
	if err := w.Add(ctx, tx, untraced); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	writerSpan.End()
	var created time.Time
	if err := db.Pool.QueryRow(ctx, "SELECT created_at FROM outbox WHERE id = $1", traced.ID).Scan(&created); err != nil {
		t.Fatal(err)
	}

	startRelay(t, db, k, topic, opts{tracer: tp})
	partition := map[string]string{}
	for _, r := range k.Consume(t, topic, 2, 20*time.Second) {
		partition[r.Headers["event_id"]] = strconv.Itoa(int(r.Partition))
	}
	id := traced.ID.String()
	if partition[id] == "" || partition[untraced.ID.String()] == "" {
		t.Fatalf("records consumed: partitions %v, want both events", partition)
	}

	waited, sent := waitSpans(t, exp, id, topic)
	wsc := writerSpan.SpanContext()
	for _, s := range []tracetest.SpanStub{waited, sent} {
		if s.SpanContext.TraceID() != wsc.TraceID() || s.Parent.SpanID() != wsc.SpanID() {
			t.Errorf("span %q: trace %s parent %s, want a child of the writer's span %s/%s",
				s.Name, s.SpanContext.TraceID(), s.Parent.SpanID(), wsc.TraceID(), wsc.SpanID())
		}
		checkAttrs(t, s, map[attribute.Key]string{
			"messaging.system": "kafka", "messaging.destination.name": topic, "messaging.destination.partition.id": partition[id],
			"messaging.message.id": id, "messaging.kafka.message.key": "pay_1", "outbox.event_type": "test.event",
			"outbox.outcome": string(relay.OutcomePublished), "outbox.attempts": "0",
		})
		if s.Status.Code != codes.Unset || attrOf(s, "error.type") != "" {
			t.Errorf("span %q of a published event: status %v, error.type %q", s.Name, s.Status, attrOf(s, "error.type"))
		}
	}
	if waited.SpanKind != trace.SpanKindInternal || sent.SpanKind != trace.SpanKindProducer {
		t.Errorf("kinds: outbox %v, send %v; want internal, producer", waited.SpanKind, sent.SpanKind)
	}
	if !waited.StartTime.Equal(created) || !waited.EndTime.Equal(sent.StartTime) || sent.EndTime.Before(sent.StartTime) {
		t.Errorf("outbox span %s .. %s, send span %s .. %s; want created_at %s .. the send's start",
			waited.StartTime, waited.EndTime, sent.StartTime, sent.EndTime, created)
	}
	if got := attrOf(sent, "messaging.operation.type"); got != "send" {
		t.Errorf("send span: messaging.operation.type %q", got)
	}

	own, ownSent := waitSpans(t, exp, untraced.ID.String(), topic)
	if own.Parent.IsValid() || own.SpanContext.TraceID() == wsc.TraceID() || ownSent.SpanContext.TraceID() != own.SpanContext.TraceID() {
		t.Errorf("an event written without a span: outbox span trace %s parent %v, send span trace %s; want one new trace",
			own.SpanContext.TraceID(), own.Parent, ownSent.SpanContext.TraceID())
	}
}

// An event the relay can never publish (over the publisher's limit,
// written by plain SQL past the writer's check) is dead-lettered: its send
// span and its outbox span say so, with the reason, in the writer's
// trace. Publishing an event afterwards does not log "publishing works
// again": a dead letter alone is no failure episode that recovers.
func TestTracingSaysDeadLettered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, k := testenv.MigratedDB(t), testenv.Kafka(t)
	topic := k.Topic(t, 1)
	tp, exp := newTracing(t)
	core, logs := observer.New(zapcore.InfoLevel)
	log := zap.New(zapcore.NewTee(testenv.Logger(t).Core(), core))

	_, writerSpan := tp.Tracer("app").Start(ctx, "import")
	sc := writerSpan.SpanContext()
	traceparent := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
	writerSpan.End()
	id := outbox.NewID().String()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload, headers)
VALUES ($1, 'big', 'test.big', jsonb_build_object('blob', repeat('x', 2000000)), jsonb_build_object('traceparent', $2::text))`, id, traceparent); err != nil {
		t.Fatal(err)
	}
	h := startRelay(t, db, k, topic, opts{tracer: tp, log: log})
	testenv.Eventually(t, 20*time.Second, func() bool { return h.relay.Stats().DeadLettered == 1 }, "not dead-lettered")

	waited, sent := waitSpans(t, exp, id, topic)
	for _, s := range []tracetest.SpanStub{waited, sent} {
		if s.SpanContext.TraceID() != sc.TraceID() || s.Parent.SpanID() != sc.SpanID() {
			t.Errorf("span %q: trace %s parent %s, want a child of the writer's span", s.Name, s.SpanContext.TraceID(), s.Parent.SpanID())
		}
		checkAttrs(t, s, map[attribute.Key]string{
			"messaging.destination.name": topic, "messaging.message.id": id,
			"outbox.outcome": string(relay.OutcomeDeadLettered), "outbox.attempts": "1", "error.type": "message_too_large",
		})
		if s.Status.Code != codes.Error || !strings.Contains(s.Status.Description, "over the publisher's limit") {
			t.Errorf("span %q: status %v, want Error naming the publisher's limit", s.Name, s.Status)
		}
	}

	// Another event after the dead letter is published in a batch of its
	// own; once the relay has stopped, every batch is settled and logged.
	after := event("other", 1)
	addTx(t, db, nil, after)
	k.Consume(t, topic, 1, 20*time.Second)
	h.stop()
	var msgs []string
	for _, e := range logs.FilterLoggerName("relay").All() {
		msgs = append(msgs, e.Message)
	}
	dead := 0
	for _, m := range msgs {
		switch {
		case strings.HasPrefix(m, "events dead-lettered"):
			dead++
		case m == "publishing works again", strings.HasPrefix(m, "relay stopping while publishes fail"):
			t.Errorf("logged %q after a lone dead letter; all relay lines: %q", m, msgs)
		}
	}
	if dead != 1 {
		t.Errorf("%d dead-letter lines, want 1; all relay lines: %q", dead, msgs)
	}
}

// A publish the broker refuses once with an error of no known class
// (UNKNOWN_SERVER_ERROR: retried, counting an attempt) and accepts the
// next time: the event has a send span per attempt, the first with
// outcome retried, error.type and status Error, the second published,
// both children of the writer's span; its one outbox span runs from
// created_at to the start of the publish that went through. kfake stands
// in for the broker for its produce hook.
func TestTracingRetriedThenPublished(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	k := testenv.KafkaFake(t)
	topic := k.Topic(t, 1)
	var refused atomic.Int64
	k.Cluster.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		k.Cluster.KeepControl()
		if !refused.CompareAndSwap(0, 1) {
			return nil, nil, false
		}
		req := kreq.(*kmsg.ProduceRequest)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition, sp.ErrorCode, sp.BaseOffset = rp.Partition, kerr.UnknownServerError.Code, -1
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	tp, rec := newTracing(t)
	app, writerSpan := tp.Tracer("app").Start(ctx, "refund")
	ev := event("pay_9", 1)
	if err := writer(t, db, outbox.WakeupDebounced).Add(app, db.Pool, ev); err != nil {
		t.Fatal(err)
	}
	writerSpan.End()
	var created time.Time
	if err := db.Pool.QueryRow(ctx, "SELECT created_at FROM outbox WHERE id = $1", ev.ID).Scan(&created); err != nil {
		t.Fatal(err)
	}

	startRelay(t, db, k, topic, opts{tracer: tp, relay: relay.Config{RetryMin: 50 * time.Millisecond, RetryMax: 100 * time.Millisecond}})
	k.Consume(t, topic, 1, 20*time.Second)
	id := ev.ID.String()
	var got map[string][]tracetest.SpanStub
	testenv.Eventually(t, 20*time.Second, func() bool {
		got = spansOf(rec, id)
		return len(got["outbox "+topic]) == 1 && len(got["send "+topic]) == 2
	}, "want one outbox and two send spans for event %s", id)
	if refused.Load() != 1 {
		t.Fatalf("the broker refused %d produce requests, want 1", refused.Load())
	}
	sends := got["send "+topic]
	if sends[1].StartTime.Before(sends[0].StartTime) {
		sends[0], sends[1] = sends[1], sends[0]
	}
	first, second, waited := sends[0], sends[1], got["outbox "+topic][0]
	wsc := writerSpan.SpanContext()
	for _, s := range []tracetest.SpanStub{first, second, waited} {
		if s.SpanContext.TraceID() != wsc.TraceID() || s.Parent.SpanID() != wsc.SpanID() {
			t.Errorf("span %q: trace %s parent %s, want a child of the writer's span", s.Name, s.SpanContext.TraceID(), s.Parent.SpanID())
		}
	}
	checkAttrs(t, first, map[attribute.Key]string{
		"messaging.message.id": id, "messaging.destination.partition.id": "0",
		"outbox.outcome": string(relay.OutcomeRetried), "outbox.attempts": "1", "error.type": "other",
	})
	if first.Status.Code != codes.Error || !strings.Contains(first.Status.Description, "[-1] Unknown") {
		t.Errorf("retried send span: status %v, want Error with the broker's error (code -1)", first.Status)
	}
	for _, s := range []tracetest.SpanStub{second, waited} {
		checkAttrs(t, s, map[attribute.Key]string{
			"messaging.message.id": id, "messaging.destination.partition.id": "0",
			"outbox.outcome": string(relay.OutcomePublished), "outbox.attempts": "1", "error.type": "",
		})
		if s.Status.Code != codes.Unset {
			t.Errorf("span %q of the published attempt: status %v", s.Name, s.Status)
		}
	}
	if !waited.StartTime.Equal(created) || !waited.EndTime.Equal(second.StartTime) ||
		first.StartTime.Before(created) || first.EndTime.Before(first.StartTime) || !first.EndTime.Before(second.StartTime) {
		t.Errorf("outbox span %s .. %s, sends %s .. %s and %s .. %s; want created_at %s to the second send's start",
			waited.StartTime, waited.EndTime, first.StartTime, first.EndTime, second.StartTime, second.EndTime, created)
	}
}
