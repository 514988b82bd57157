package produce

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/kafka"

	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/pgoutbox/outbox/lease"
)

func TestAttemptBudget(t *testing.T) {
	for _, c := range []struct {
		attempts int
		timeout  time.Duration
		want     time.Duration
	}{
		{0, 0, 3*kafka.DefaultWriteTimeout + 500*time.Millisecond}, // defaults: 3 attempts + 100ms + 400ms
		{1, 2 * time.Second, 2 * time.Second},
		{2, time.Second, 2*time.Second + 100*time.Millisecond},
		{5, time.Second, 5*time.Second + (100+400+900+1000)*time.Millisecond}, // backoff capped at 1s
	} {
		p := newTestPublisher(t, kafka.Config{Brokers: []string{"127.0.0.1:1"}, MaxAttempts: c.attempts, WriteTimeout: c.timeout})
		if got := p.AttemptBudget(); got != c.want {
			t.Errorf("MaxAttempts %d, WriteTimeout %v: AttemptBudget = %v, want %v", c.attempts, c.timeout, got, c.want)
		}
	}
	// The relay refuses a budget over half its lease (relay.BudgetError):
	// the defaults must fit the default lease.
	p := newTestPublisher(t, kafka.Config{Brokers: []string{"127.0.0.1:1"}})
	if b := p.AttemptBudget(); b > lease.DefaultLease/2 {
		t.Errorf("default AttemptBudget %v is over half the default lease %v", b, lease.DefaultLease)
	}
	t.Logf("DefaultWriteTimeout %v, default AttemptBudget %v, lease.DefaultLease %v",
		kafka.DefaultWriteTimeout, p.AttemptBudget(), lease.DefaultLease)
}

// TestAttemptBudgetIsTheWorstCase: against a broker that swallows produce
// requests, one Publish takes the AttemptBudget, not more.
func TestAttemptBudgetIsTheWorstCase(t *testing.T) {
	b, topic := newFakeBroker(t, 1)
	p := newTestPublisher(t, kafka.Config{Brokers: b.addrs, Topic: topic, WriteTimeout: 300 * time.Millisecond})
	if err := p.Send(context.Background(), testMessages(1, []string{"a"})); err != nil {
		t.Fatal(err)
	}
	var swallowed atomic.Int64
	b.cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		b.cluster.KeepControl()
		swallowed.Add(1)
		return nil, nil, true // handled, no answer: the client times out
	})
	budget := p.AttemptBudget() // 3 × 300ms + 100ms + 400ms = 1.4s
	start := time.Now()
	err := p.Send(context.Background(), testMessages(1, []string{"a"}))
	took := time.Since(start)
	if !IsOutage(err) || !errors.As(err, new(*PublishError)) {
		t.Errorf("Publish = %v, want a PublishError of unreachable timeouts", err)
	}
	if n := swallowed.Load(); n != 3 {
		t.Errorf("%d produce attempts, want 3", n)
	}
	if took < budget-50*time.Millisecond || took > budget+time.Second {
		t.Errorf("Publish took %v, AttemptBudget %v", took, budget)
	}
	t.Logf("Publish took %v, AttemptBudget %v", took.Round(time.Millisecond), budget)
}

func TestRetryLoggerRateLimit(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	l := newRetryLogger(zap.New(core))
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	for i := 0; i < 100; i++ {
		l.Printf("error writing messages to %s (partition %d, attempt %d): %s", "t", 1, i, "[6] Not Leader For Partition")
	}
	now = now.Add(retryLogInterval - time.Millisecond)
	l.Printf("still failing")
	now = now.Add(time.Millisecond)
	l.Printf("failing after %s", retryLogInterval)

	warns := logs.FilterLevelExact(zapcore.WarnLevel).All()
	if len(warns) != 2 {
		t.Fatalf("%d Warn lines, want 2: %v", len(warns), warns)
	}
	if got := warns[0].ContextMap()["suppressed"]; got != int64(0) {
		t.Errorf("first Warn: suppressed = %v, want 0", got)
	}
	if got := warns[1].ContextMap()["suppressed"]; got != int64(100) || warns[1].Message != "kafka-go: failing after 10s" {
		t.Errorf("second Warn: %q suppressed = %v, want 100", warns[1].Message, got)
	}
	if n := logs.FilterLevelExact(zapcore.DebugLevel).Len(); n != 100 {
		t.Errorf("%d Debug lines, want 100", n)
	}
}

// TestRetryLogUnderFailingBroker: a partition whose broker keeps failing
// produces one kafka-go Warn line, not one per batch and attempt.
func TestRetryLogUnderFailingBroker(t *testing.T) {
	b, topic := newFakeBroker(t, 3)
	core, logs := observer.New(zapcore.InfoLevel)
	p, err := NewPublisher(kafka.Config{Brokers: b.addrs, Topic: topic}, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Close() }()
	failProduce(b.cluster, topic, 1, 19) // NOT_ENOUGH_REPLICAS, retriable
	const calls = 5
	for i := 0; i < calls; i++ {
		err := p.Send(context.Background(), testMessages(30, []string{"k1", "k2", "k3", "k4", "k5", "k6"}))
		if !errors.As(err, new(*PublishError)) {
			t.Fatalf("Publish = %v", err)
		}
	}
	kafkaGo := logs.FilterMessageSnippet("kafka-go: ").FilterLevelExact(zapcore.WarnLevel)
	if kafkaGo.Len() != 1 {
		t.Errorf("%d kafka-go Warn lines for %d calls × 3 attempts, want 1: %v", kafkaGo.Len(), calls, kafkaGo.All())
	}
}
