package relay_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/produce"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/kafka"
	"github.com/pgoutbox/outbox/lease"
	"github.com/pgoutbox/outbox/relay"
)

// flakyReleaseClaimer is the real claimer whose first backoff releases
// fail, as a database that drops the connection for a moment would: all
// the relay's attempts at giving the failed row back fail.
type flakyReleaseClaimer struct {
	*claim.Claimer
	failures atomic.Int32
}

func (c *flakyReleaseClaimer) Release(ctx context.Context, s claim.Settle) (int64, error) {
	if s.RetryIn > 0 && c.failures.Add(1) <= 3 {
		return 0, errors.New("injected: connection reset by peer")
	}
	return c.Claimer.Release(ctx, s)
}

// failOncePublisher is the real publisher, answering NOT_ENOUGH_REPLICAS
// once for the event failID (and the later events of its key in the call).
type failOncePublisher struct {
	*produce.Publisher
	failID string
	done   atomic.Bool
	mu     sync.Mutex
	order  []string
}

func (p *failOncePublisher) Publish(ctx context.Context, msgs []kafka.Message) []produce.Result {
	return produce.Path{Send: p.send, MaxBytes: p.MaxBatchBytes(), MaxMessages: p.MaxBatchMessages()}.Publish(ctx, msgs)
}

func (p *failOncePublisher) send(ctx context.Context, msgs []kafka.Message) error {
	for i, m := range msgs {
		if string(m.Headers[0].Value) == p.failID && p.done.CompareAndSwap(false, true) {
			errs := make([]error, len(msgs))
			for j := range msgs {
				if string(msgs[j].Key) == string(m.Key) && j >= i {
					errs[j] = kafkago.NotEnoughReplicas
				}
			}
			return &produce.PublishError{Errs: errs}
		}
	}
	return p.Publisher.Send(ctx, msgs)
}

// Found by a reviewer: when the failed event's backoff release itself
// failed, the row stayed leased by this relay, its own lease did not hold
// back its next claim, and A2 went out before A1.
func TestOrderKeptWhenTheFailedEventCannotBeReleased(t *testing.T) {
	t.Parallel()
	db, k := testenv.MigratedDB(t), testenv.Kafka(t)
	topic := k.Topic(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a1, a2 := event("A", 1), event("A", 2)
	addTx(t, db, nil, a1)
	addTx(t, db, nil, a2)

	pub := &failOncePublisher{failID: a1.ID.String()}
	cl := &flakyReleaseClaimer{}
	svc, err := relay.NewService(db.Pool, relay.ServiceConfig{
		Relay:    relay.Config{Topic: topic, PollInterval: 50 * time.Millisecond, RetryMin: 100 * time.Millisecond},
		Lease:    lease.Config{Lease: time.Second, BatchSize: 1},
		Kafka:    kafka.Config{Brokers: k.Brokers, WriteTimeout: 100 * time.Millisecond, MaxAttempts: 1},
		NoNotify: true,
		WrapClaimer: func(c relay.Claimer) relay.Claimer {
			cl.Claimer = c.(*claim.Claimer)
			return cl
		},
		WrapPublisher: func(p relay.Publisher) relay.Publisher {
			pub.Publisher = p.(*produce.Publisher)
			return pub
		},
	}, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = svc.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	// Until A2 is on the topic (one partition): A1 may be there twice, a
	// publish that timed out having reached the broker.
	recs := consumeUntil(t, k, topic, 20*time.Second, a1.ID.String(), a2.ID.String())
	order, _ := firstAppearances(recs)
	got := order["A"]
	t.Logf("first appearances for A: %v (A1=%s A2=%s)", got, a1.ID, a2.ID)
	if len(got) != 2 || got[0] != a1.ID.String() {
		t.Fatalf("A2 was published before A1")
	}
}
