package outboxtest

import (
	"bytes"
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/produce"
	"github.com/pgoutbox/outbox/kafka"
	"github.com/pgoutbox/outbox/relay"
)

// placeholderBroker is the broker address Publisher.ServiceConfig gives a
// configuration without brokers: produce.NewPublisher requires one, and the
// Kafka publisher NewService builds is then never used (Publisher
// replaces it), so nothing connects to it.
const placeholderBroker = "127.0.0.1:9"

// Publisher records what the relay publishes instead of sending it to
// Kafka: it is a relay.Publisher. relay.New takes it as it is;
// relay.NewService takes it through ServiceConfig (or Wrap as
// relay.ServiceConfig.WrapPublisher). Every Publish is acknowledged at
// once unless Fail set an error. The zero value is ready to use; safe for
// concurrent use.
type Publisher struct {
	mu      sync.Mutex
	msgs    []kafka.Message
	calls   int
	err     error
	changed chan struct{} // closed and replaced when msgs grows
}

var _ relay.Publisher = (*Publisher)(nil)

// NewPublisher returns an empty Publisher.
func NewPublisher() *Publisher { return &Publisher{} }

// Publish records copies of msgs, in order, and says each was published;
// or, after Fail(err), records nothing and fails every message with err,
// as a broker that cannot be reached (the relay retries with backoff). It
// fails them with ctx's error if ctx is done. It cuts msgs into requests
// as the Kafka publisher does (produce.Path, at MaxBatchBytes).
func (p *Publisher) Publish(ctx context.Context, msgs []kafka.Message) []produce.Result {
	return produce.Path{Send: p.send, MaxBytes: p.MaxBatchBytes(), MaxMessages: kafka.DefaultBatchSize}.Publish(ctx, msgs)
}

// send is Publish's produce.SendFunc: it records one request.
func (p *Publisher) send(ctx context.Context, msgs []kafka.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if p.err != nil {
		return p.err
	}
	for _, m := range msgs {
		p.msgs = append(p.msgs, copyMessage(m))
	}
	if p.changed != nil && len(msgs) > 0 {
		close(p.changed)
		p.changed = nil
	}
	return nil
}

// MaxBatchBytes returns kafka.DefaultBatchBytes (1 MiB), what the Kafka
// publisher allows by default, so that Publish cuts requests as it would
// for Kafka.
func (p *Publisher) MaxBatchBytes() int64 { return kafka.DefaultBatchBytes }

// Fail makes every later Publish return err without recording anything;
// Fail(nil) makes them succeed again.
func (p *Publisher) Fail(err error) {
	p.mu.Lock()
	p.err = err
	p.mu.Unlock()
}

// Calls returns how many times Publish was called, failed calls included.
func (p *Publisher) Calls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

// Messages returns copies of the messages published so far, in the order
// Publish received them.
func (p *Publisher) Messages() []kafka.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]kafka.Message, len(p.msgs))
	for i, m := range p.msgs {
		out[i] = copyMessage(m)
	}
	return out
}

// Wait returns the messages published so far once there are at least n,
// and fails t (Fatalf) if there are still fewer after timeout.
func (p *Publisher) Wait(t testing.TB, n int, timeout time.Duration) []kafka.Message {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		if len(p.msgs) >= n {
			p.mu.Unlock()
			return p.Messages()
		}
		if p.changed == nil {
			p.changed = make(chan struct{})
		}
		changed, have := p.changed, len(p.msgs)
		p.mu.Unlock()
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("outboxtest: %d messages published after %s, want %d", have, timeout, n)
			return nil
		}
	}
}

// Wrap returns p in place of the publisher relay.NewService built: use it
// as relay.ServiceConfig.WrapPublisher.
func (p *Publisher) Wrap(relay.Publisher) relay.Publisher { return p }

// ServiceConfig returns cfg with p as its publisher (WrapPublisher), for
// relay.NewService: the relay's claims, marks, retries and dead letters run
// on the real table, and what it would send to Kafka is recorded by p.
// When cfg names no broker it gets a placeholder address, which nothing
// connects to (the Kafka publisher is built, as NewService always does,
// but never used).
func (p *Publisher) ServiceConfig(cfg relay.ServiceConfig) relay.ServiceConfig {
	cfg.WrapPublisher = p.Wrap
	if len(cfg.Kafka.Brokers) == 0 {
		cfg.Kafka.Brokers = []string{placeholderBroker}
	}
	return cfg
}

// Header returns the value of m's header name and whether it has one (the
// first, if several).
func Header(m kafka.Message, name string) (string, bool) {
	for _, h := range m.Headers {
		if h.Key == name {
			return string(h.Value), true
		}
	}
	return "", false
}

func copyMessage(m kafka.Message) kafka.Message {
	c := kafka.Message{Topic: m.Topic, Key: bytes.Clone(m.Key), Value: bytes.Clone(m.Value), Headers: slices.Clone(m.Headers)}
	for i := range c.Headers {
		c.Headers[i].Value = bytes.Clone(c.Headers[i].Value)
	}
	return c
}
