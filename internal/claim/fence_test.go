package claim_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/lease"
)

// TestClaimTakesNothingFromPartitionsThatMoved: a relay whose partitions
// were taken over while its membership had run out, and whose membership
// row is live again before it rebalanced (its join committed just after
// the takeover's), still believes it owns every partition. Its next claim
// must take nothing (the claim checks the generation its view of what it
// owns was read at), say so (More: claim again at once), and the claim
// after that must rebalance and own nothing, while the other relay owns
// everything: no row of a partition is ever claimed by two relays.
func TestClaimTakesNothingFromPartitionsThatMoved(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	// A long lease: a does not rebalance on its own during the test (it
	// renews every sixth of its lease, which a slow machine could reach
	// within a 1-minute lease).
	a := newClaimer(t, db.Pool, lease.Config{RelayID: "a", BatchSize: 100, Lease: 10 * time.Minute})
	b := newClaimer(t, db.Pool, lease.Config{RelayID: "b", BatchSize: 100, Lease: time.Minute})
	first, err := a.Claim(ctx) // a joins and acquires every partition
	if err != nil {
		t.Fatal(err)
	}
	a.Settled(first.Token, time.Time{})
	if o := a.Ownership(); o.Partitions == 0 || o.Owned != o.Partitions {
		t.Fatalf("a alone owns %d of %d partitions, want all", o.Owned, o.Partitions)
	}
	// a's membership runs out; b joins, finds a gone and takes everything.
	var aUntil time.Time
	if err := db.Pool.QueryRow(ctx, "UPDATE outbox_relays SET until = now() - interval '1 second' WHERE member = $1 RETURNING until + interval '1 minute 1 second'",
		a.Member()).Scan(&aUntil); err != nil {
		t.Fatal(err)
	}
	bt, err := b.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b.Settled(bt.Token, time.Time{})
	if o := b.Ownership(); o.Owned != o.Partitions {
		t.Fatalf("b owns %d of %d partitions after a's membership ran out, want all", o.Owned, o.Partitions)
	}
	// a's membership is live again, a has not rebalanced: its view says
	// it owns every partition.
	if _, err := db.Pool.Exec(ctx, "INSERT INTO outbox_relays (member, relay_id, until) VALUES ($1, 'a', $2)", a.Member(), aUntil); err != nil {
		t.Fatal(err)
	}
	addEvents(t, db.Pool, "x", "y", "z")
	stale, err := a.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(stale.Rows) != 0 {
		t.Fatalf("a claimed %d rows of partitions b owns", len(stale.Rows))
	}
	if !stale.More {
		t.Error("a's claim with a stale view of its partitions did not say to claim again at once (More)")
	}
	a.Settled(stale.Token, time.Time{})
	next, err := a.Claim(ctx) // rebalances: b is live and owns everything
	if err != nil {
		t.Fatal(err)
	}
	if len(next.Rows) != 0 {
		t.Fatalf("a claimed %d rows after rebalancing, while b owns every partition", len(next.Rows))
	}
	if o := a.Ownership(); o.Owned != 0 {
		t.Fatalf("a owns %d partitions after rebalancing, want 0 (b is live and owns them)", o.Owned)
	}
	got, err := b.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Rows) != 3 {
		t.Fatalf("b claimed %d of the 3 new events, want all", len(got.Rows))
	}
}
