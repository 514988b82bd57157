package relay

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/produce"
	"github.com/pgoutbox/outbox/kafka"
	"github.com/pgoutbox/outbox/lease"
)

// benchClaimer and benchPublisher answer at once and succeed, so that
// BenchmarkPublishBatch measures the relay's own work around a publish, not
// PostgreSQL's or a broker's (their costs are in the kafka and lease
// benchmarks and in make bench).
type benchClaimer struct{}

func (benchClaimer) Claim(context.Context, ...*claim.Mark) (*claim.Batch, error) {
	return &claim.Batch{}, nil
}
func (benchClaimer) MarkPublished(_ context.Context, _ uuid.UUID, seqs []int64) (int64, error) {
	return int64(len(seqs)), nil
}
func (benchClaimer) Extend(_ context.Context, _ uuid.UUID, seqs []int64) ([]int64, time.Duration, error) {
	return seqs, time.Minute, nil
}
func (benchClaimer) Release(_ context.Context, s claim.Settle) (int64, error) {
	return int64(len(s.Seqs)), nil
}
func (benchClaimer) DeadLetter(_ context.Context, s claim.Settle) (int64, error) {
	return int64(len(s.Seqs)), nil
}
func (benchClaimer) Settled(uuid.UUID, time.Time) {}
func (benchClaimer) PollShared()                  {}
func (benchClaimer) Ownership() claim.Ownership {
	return claim.Ownership{Partitions: 1, Owned: 1, Members: 1}
}
func (benchClaimer) Close(context.Context) error { return nil }
func (benchClaimer) Config() lease.Config        { return lease.Config{Lease: time.Minute}.WithDefaults() }
func (benchPublisher) Publish(_ context.Context, msgs []kafka.Message) []produce.Result {
	return make([]produce.Result, len(msgs)) // all produce.Published
}

type benchPublisher struct{}

// benchRows returns n claimed rows of 10 aggregates, each written under a
// span (a traceparent header, as outbox.Add stores it).
func benchRows(n int) []claim.Row {
	rows := make([]claim.Row, n)
	created := time.Now().Add(-2 * time.Millisecond)
	for i := range rows {
		rows[i] = claim.Row{
			Seq: int64(i + 1), ID: fmt.Sprintf("0192f3a4-5b6c-7d8e-9f00-%012d", i),
			AggregateID: "pay_" + strconv.Itoa(i%10), EventType: "payment.captured",
			Payload:   []byte(`{"amount":"12.50","currency":"EUR"}`),
			Headers:   map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
			CreatedAt: created,
		}
	}
	return rows
}

// benchmarkPublishBatch runs Relay.publishBatch, the publisher goroutine's
// work for one claimed batch (chunks, messages, the observer calls, the
// mark queue, settling), on a batch of n rows that all publish.
func benchmarkPublishBatch(b *testing.B, cfg Config, n int) {
	r, err := New(cfg, benchClaimer{}, benchPublisher{}, nil, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	rows := benchRows(n)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		batch := claimed{Batch: &claim.Batch{Token: uuid.New(), Rows: rows, Claimed: time.Now()}, no: uint64(i + 1)}
		r.publishBatch(ctx, ctx, batch)
		r.marks.take(time.Time{}) // the marker's part
	}
}

// BenchmarkPublishBatch is the relay's cost per claimed batch around the
// publish itself, with tracing off (no TracerProvider: what every relay
// without OTEL_* variables runs), on (an SDK provider with the batching
// span processor outbox-relay uses, exporting to nowhere), and on with a
// sampler that drops every span.
func BenchmarkPublishBatch(b *testing.B) {
	providers := []struct {
		name string
		opts []sdktrace.TracerProviderOption
	}{
		{"on", []sdktrace.TracerProviderOption{sdktrace.WithBatcher(tracetest.NewNoopExporter())}},
		{"on-unsampled", []sdktrace.TracerProviderOption{sdktrace.WithBatcher(tracetest.NewNoopExporter()), sdktrace.WithSampler(sdktrace.NeverSample())}},
	}
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprintf("events=%d/tracing=off", n), func(b *testing.B) {
			benchmarkPublishBatch(b, Config{Topic: "payments"}, n)
		})
		for _, p := range providers {
			b.Run(fmt.Sprintf("events=%d/tracing=%s", n, p.name), func(b *testing.B) {
				tp := sdktrace.NewTracerProvider(p.opts...)
				defer func() { _ = tp.Shutdown(context.Background()) }()
				benchmarkPublishBatch(b, Config{Topic: "payments", Observer: NewTracingObserver(tp)}, n)
			})
		}
	}
}
