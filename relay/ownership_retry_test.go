package relay_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/lease"
	"github.com/pgoutbox/outbox/outboxtest"
	"github.com/pgoutbox/outbox/relay"
)

// After another relay joined and left (two changes of the relays'
// ownership, none of this relay's partitions moving), this relay's next
// claim takes nothing (its view of what it owns is from before) and says
// to claim again at once (claim.Batch.More): the relay must, so that an
// event whose notification woke that claim is published at once, not at
// the next poll (a minute here; the claim window is off).
func TestClaimAgainAtOnceWhenOwnershipMoved(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	a, err := claim.New(db.Pool, lease.Config{RelayID: "a", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	pub := outboxtest.NewPublisher()
	wake := make(chan struct{}, 1)
	r, err := relay.New(relay.Config{Topic: "t", PollInterval: time.Minute, ClaimWindow: -1}, a, pub, wake, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	defer func() { cancel(); <-done }()
	add := func(agg string) {
		if err := outbox.Add(ctx, db.Pool, outbox.Event{AggregateID: agg, Type: "t", Payload: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	testenv.Eventually(t, 10*time.Second, func() bool { o := a.Ownership(); return o.Partitions > 0 && o.Owned == o.Partitions },
		"the relay does not own every partition")
	add("x")
	pub.Wait(t, 1, 10*time.Second)
	b, err := claim.New(db.Pool, lease.Config{RelayID: "b", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	bt, err := b.Claim(ctx) // b joins: the generation moves
	if err != nil {
		t.Fatal(err)
	}
	if len(bt.Rows) != 0 {
		t.Fatalf("b claimed %d rows of a's partitions", len(bt.Rows))
	}
	b.Settled(bt.Token, time.Time{})
	if err := b.Close(ctx); err != nil { // and leaves: it moves again
		t.Fatal(err)
	}
	began := time.Now()
	add("y")
	pub.Wait(t, 2, 10*time.Second)
	t.Logf("the event after the ownership moved was published %s after its notification", time.Since(began).Round(time.Millisecond))
}
