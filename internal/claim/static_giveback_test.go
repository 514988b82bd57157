package claim_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/ownership"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/lease"
)

// A static member restarted while its earlier incarnation is paused with a
// lease on a row of a partition assigned to another member (which joined
// after the claim): the takeover keeps that lease, so the new incarnation
// must keep the partition until it ends, and the other member must not
// claim the aggregate's later event before. Found by
// relay.TestModelOwnershipRestartsUnderTheSameRelayID (issue 29): the new
// incarnation, which had claimed nothing, found the partition idle and
// gave it back in its first rebalance, and the other member, without an
// order guard, claimed x#2 while x#1 was leased.
func TestStaticTakeoverKeepsBusyThePartitionsItGivesBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	cfg := lease.Config{RelayID: "pod-0", BatchSize: 1, Lease: time.Minute}
	old := newClaimer(t, db.Pool, cfg)
	if _, err := old.Claim(ctx); err != nil { // joins: owns every partition
		t.Fatal(err)
	}
	other := newClaimer(t, db.Pool, lease.Config{RelayID: "pod-1", BatchSize: 10, Lease: time.Minute})
	parts := old.Ownership().Partitions
	assigned := ownership.Assign([]string{"pod-0", other.Member()}, parts)
	agg := ""
	for i := 0; agg == ""; i++ {
		if a := fmt.Sprintf("x%d", i); assigned[outbox.KeyPartition(a, parts)] == other.Member() {
			agg = a
		}
	}
	want := addEvents(t, db.Pool, agg, agg)
	held, got := claimIDs(t, old)
	if !slices.Equal(got, want[:1]) {
		t.Fatalf("old incarnation claimed %v, want %s#1", got, agg)
	}
	if _, err := other.Claim(ctx); err != nil { // joins; pod-0 owns its partitions still
		t.Fatal(err)
	}
	// The old incarnation is paused now, holding x#1; a new one takes over.
	cfg.BatchSize = 10
	next := newClaimer(t, db.Pool, cfg)
	b, _ := claimIDs(t, next)
	next.Settled(b.Token, time.Time{})
	if o := next.Ownership(); o.TakeoverBlocked.IsZero() {
		t.Fatalf("after the takeover: %+v, want the old incarnation's lease kept", o)
	}
	for range 3 {
		b, got := claimIDs(t, other)
		if slices.Contains(got, want[1]) {
			t.Fatalf("%s claimed %s#2 while the paused incarnation of pod-0 holds %s#1 leased (token %s); the new one: %+v",
				other.Member(), agg, agg, held.Token, next.Ownership())
		}
		other.Settled(b.Token, time.Time{})
	}
}
