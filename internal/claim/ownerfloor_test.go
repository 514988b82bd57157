package claim_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/leasetest"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/lease"
)

// With two relays, one relay's floor counts only the partitions it owns:
// the other relay's unpublished backlog does not hold it back (each of
// its claims would otherwise walk that backlog and every row published
// since). When the other relay leaves and this one acquires its
// partitions, the floor drops, and the next claims take the rows it had
// passed at once, not at the once-a-minute rescan.
func TestFloorCountsOnlyOwnedPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	a := newClaimer(t, db.Pool, lease.Config{RelayID: "a", BatchSize: 1000, Lease: 3 * time.Second})
	// b's membership outlasts the test: b claims nothing after settling,
	// and its partitions must not move to a before b leaves.
	b := newClaimer(t, db.Pool, lease.Config{RelayID: "b", BatchSize: 1000, Lease: time.Minute})
	aggs := leasetest.Aggregates(leasetest.Settle(t, db.Pool, "outbox", a, b), 20)
	aggsA, aggsB := aggs[a.Member()], aggs[b.Member()]
	publish := func(c *claim.Claimer) int {
		t.Helper()
		bt, err := c.Claim(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(bt.Rows) > 0 {
			if _, err := c.MarkPublished(ctx, bt.Token, seqs(bt)); err != nil {
				t.Fatal(err)
			}
		}
		c.Settled(bt.Token, time.Time{})
		return len(bt.Rows)
	}
	// b's backlog first (the lowest seqs), which b never claims.
	bIDs := addEvents(t, db.Pool, aggsB...)
	var maxB int64
	if err := db.Pool.QueryRow(ctx, "SELECT max(seq) FROM outbox").Scan(&maxB); err != nil {
		t.Fatal(err)
	}
	// max_connections is the floor's safety margin: give it seqs to pass.
	var margin int64
	if err := db.Pool.QueryRow(ctx, "SELECT current_setting('max_connections')::bigint").Scan(&margin); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, "SELECT setval(pg_get_serial_sequence('outbox', 'seq'), $1)", maxB+margin+100); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		addEvents(t, db.Pool, aggsA...)
		publish(a)
		return a.Floor() > maxB
	}, "relay a's floor stayed at relay b's backlog (floor %d, b's rows up to seq %d)", a.Floor(), maxB)

	// b leaves; a acquires b's partitions and claims b's backlog at once.
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got := 0
	testenv.Eventually(t, 15*time.Second, func() bool {
		got += publish(a)
		var left int
		if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE published_at IS NULL AND id = ANY($1)", bIDs).Scan(&left); err != nil {
			t.Fatal(err)
		}
		return left == 0
	}, "relay a did not claim relay b's backlog after acquiring its partitions (floor %d)", a.Floor())
	if got < len(bIDs) {
		t.Errorf("relay a published %d rows, want at least b's %d", got, len(bIDs))
	}
}
