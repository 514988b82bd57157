package claim_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/lease"
)

// claimAll claims once, settling the batch, and returns its event IDs.
func claimIDs(t *testing.T, c *claim.Claimer) (*claim.Batch, []uuid.UUID) {
	t.Helper()
	b, err := c.Claim(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return b, ids(b)
}

// A static member (RelayID set) restarted while its earlier incarnation is
// paused, not dead (no presence, or a presence still held): the new one
// owns the partitions at once and claims every aggregate but those whose
// earlier event the old one holds leased; the old one, woken up, claims
// and extends nothing, says it was replaced, and its mark of what it
// published still counts (its lease on that row was never taken).
func TestStaticTakeoverKeepsAPausedIncarnationsLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	want := addEvents(t, db.Pool, "x", "x", "y")
	cfg := lease.Config{RelayID: "pod-0", BatchSize: 1, Lease: time.Minute}
	old := newClaimer(t, db.Pool, cfg)
	held, got := claimIDs(t, old)
	if !slices.Equal(got, want[:1]) {
		t.Fatalf("old incarnation claimed %v, want x#1", got)
	}
	cfg.BatchSize = 10
	next := newClaimer(t, db.Pool, cfg)
	b, got := claimIDs(t, next)
	if !slices.Equal(got, want[2:]) {
		t.Fatalf("new incarnation claimed %v, want y#1 only (x#2 waits behind the old one's lease of x#1)", got)
	}
	next.Settled(b.Token, time.Time{})
	if o := next.Ownership(); o.Owned != o.Partitions || o.Members != 1 || o.TakeoverBlocked.IsZero() {
		t.Fatalf("after the takeover: %+v, want every partition, one member, leases kept", o)
	}
	// The old one wakes up.
	if ext, _, err := old.Extend(ctx, held.Token, seqs(held)); err != nil || len(ext) != 0 {
		t.Fatalf("old incarnation extended %v (%v) after the takeover", ext, err)
	}
	addEvents(t, db.Pool, "z")
	for range 2 {
		b, got := claimIDs(t, old)
		if len(got) != 0 {
			t.Fatalf("old incarnation claimed %v after the takeover", got)
		}
		old.Settled(b.Token, time.Time{})
	}
	if o := old.Ownership(); !o.Replaced || o.Owned != 0 {
		t.Fatalf("old incarnation: %+v, want replaced and owning nothing", o)
	}
	if n, err := old.MarkPublished(ctx, held.Token, seqs(held)); err != nil || n != 1 {
		t.Fatalf("old incarnation's mark of x#1 it still held: %d, %v", n, err)
	}
	old.Settled(held.Token, time.Time{})
	b, got = claimIDs(t, next)
	if !slices.Contains(got, want[1]) {
		t.Fatalf("new incarnation claimed %v after x#1 was published, want x#2 among them", got)
	}
	// Close of the replaced one leaves the new one's row and partitions.
	if err := old.Close(ctx); err != nil {
		t.Fatal(err)
	}
	next.Settled(b.Token, time.Time{})
	if _, err := next.Claim(ctx); err != nil {
		t.Fatal(err)
	}
	if o := next.Ownership(); o.Owned != o.Partitions || o.Members != 1 {
		t.Fatalf("after the replaced one closed: %+v", o)
	}
}

// A static member whose earlier incarnation is gone (its presence session
// ended with its process, the declaration still there): the takeover ends
// its leases, so the new one claims its rows and their successors at
// once, and the old holder's late mark changes nothing.
func TestStaticTakeoverEndsAGoneIncarnationsLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	want := addEvents(t, db.Pool, "x")
	connect := func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, db.ConnString) }
	cfg := lease.Config{RelayID: "pod-0", BatchSize: 1, Lease: time.Minute}
	old := newClaimer(t, db.Pool, cfg)
	old.SetPresence(connect)
	held, got := claimIDs(t, old)
	if !slices.Equal(got, want[:1]) {
		t.Fatalf("old incarnation claimed %v, want x#1", got)
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		b, err := old.Claim(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Rows) > 0 {
			t.Fatalf("old incarnation claimed %v: nothing was left", ids(b))
		}
		return claim.PresenceDeclared(old)
	}, "the presence was never declared")
	want = append(want, addEvents(t, db.Pool, "x", "y")...)
	claim.KillPresence(old)
	cfg.BatchSize = 10
	next := newClaimer(t, db.Pool, cfg)
	next.SetPresence(connect)
	t.Cleanup(func() { _ = next.Close(context.Background()) })
	_, got = claimIDs(t, next)
	if !slices.Equal(got, want) {
		t.Fatalf("new incarnation claimed %v, want x#1, x#2, y#1 at once", got)
	}
	if o := next.Ownership(); o.TakeoverEnded != 1 || !o.TakeoverBlocked.IsZero() {
		t.Fatalf("takeover: %+v, want 1 lease ended, none kept", o)
	}
	if n, err := old.MarkPublished(ctx, held.Token, seqs(held)); err != nil || n != 0 {
		t.Fatalf("the gone incarnation's late mark changed %d rows (%v)", n, err)
	}
}
