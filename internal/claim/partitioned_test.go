package claim_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/lease"
)

// timePartitionedDB is TimePartitionedDB (export_test.go).
var timePartitionedDB = claim.TimePartitionedDB

// insertAt inserts one event of aggregate agg created daysAgo days ago
// and returns its ID, seq, partition and ctid.
func insertAt(t *testing.T, pool *pgxpool.Pool, agg string, daysAgo int) (id uuid.UUID, seq int64, part, ctid string) {
	t.Helper()
	id = uuid.New()
	err := pool.QueryRow(context.Background(), `INSERT INTO outbox (id, aggregate_id, event_type, payload, created_at)
VALUES ($1, $2, 't', '{}', now() - $3 * interval '1 day') RETURNING seq, tableoid::regclass::text, ctid::text`, id, agg, daysAgo).Scan(&seq, &part, &ctid)
	if err != nil {
		t.Fatal(err)
	}
	return id, seq, part, ctid
}

// On a time-partitioned table, an event in an older partition and one in
// a newer partition have the same ctid. Claims take them in seq order
// whatever their partitions (per-aggregate order across partitions), and
// mark, release, extend and dead-letter each touch exactly the row named,
// never its namesake in the other partition.
func TestPartitionedTableClaimMarkRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := timePartitionedDB(t, 3)
	// The newer event first: lower seq, newer partition.
	newID, newSeq, newPart, newCtid := insertAt(t, db.Pool, "x", 0)
	oldID, oldSeq, oldPart, oldCtid := insertAt(t, db.Pool, "x", 2)
	if newPart == oldPart || newCtid != oldCtid {
		t.Fatalf("events in %s %s and %s %s, want two partitions and one ctid", newPart, newCtid, oldPart, oldCtid)
	}
	c := newClaimer(t, db.Pool, lease.Config{BatchSize: 10, RelayID: "r1"})
	b, err := c.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Rows) != 2 || b.Rows[0].Seq != newSeq || b.Rows[1].Seq != oldSeq {
		t.Fatalf("claim %+v, want seqs %d (newer partition) then %d", b.Rows, newSeq, oldSeq)
	}
	// One claim updated both once: they still share a ctid, so a
	// statement that named rows by ctid alone would touch both.
	var ctids [2]string
	if err := db.Pool.QueryRow(ctx, `SELECT (SELECT ctid::text FROM outbox WHERE id = $1), (SELECT ctid::text FROM outbox WHERE id = $2)`, newID, oldID).Scan(&ctids[0], &ctids[1]); err != nil {
		t.Fatal(err)
	}
	if ctids[0] != ctids[1] {
		t.Fatalf("ctids after the claim %v, want one", ctids)
	}
	state := func() (pub [2]bool, attempts [2]int, dead [2]bool) {
		t.Helper()
		for i, id := range []uuid.UUID{newID, oldID} {
			if err := db.Pool.QueryRow(ctx, `SELECT published_at IS NOT NULL, attempts, dead_lettered_at IS NOT NULL FROM outbox WHERE id = $1`, id).Scan(&pub[i], &attempts[i], &dead[i]); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	if n, err := c.MarkPublished(ctx, b.Token, []int64{oldSeq}); err != nil || n != 1 {
		t.Fatalf("mark: %d %v", n, err)
	}
	if pub, _, _ := state(); pub != [2]bool{false, true} {
		t.Fatalf("published (newer, older) = %v, want only the older", pub)
	}
	if got, _, err := c.Extend(ctx, b.Token, []int64{newSeq, oldSeq}); err != nil || len(got) != 1 || got[0] != newSeq {
		t.Fatalf("extend: %v %v, want the newer row alone (the older is published)", got, err)
	}
	if n, err := c.Release(ctx, claim.Settle{Token: b.Token, Seqs: []int64{newSeq}, CountAttempt: true, LastError: "x"}); err != nil || n != 1 {
		t.Fatalf("release: %d %v", n, err)
	}
	if pub, attempts, _ := state(); pub != [2]bool{false, true} || attempts != [2]int{1, 0} {
		t.Fatalf("after the release: published %v attempts %v, want [false true] [1 0]", pub, attempts)
	}
	b2, err := c.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(b2.Rows) != 1 || b2.Rows[0].Seq != newSeq {
		t.Fatalf("claim after the release %+v, want seq %d", b2.Rows, newSeq)
	}
	if n, err := c.DeadLetter(ctx, claim.Settle{Token: b2.Token, Seqs: []int64{newSeq}, CountAttempt: true, LastError: "rejected"}); err != nil || n != 1 {
		t.Fatalf("dead-letter: %d %v", n, err)
	}
	if pub, attempts, dead := state(); pub != [2]bool{false, true} || attempts != [2]int{2, 0} || dead != [2]bool{true, false} {
		t.Fatalf("after the dead letter: published %v attempts %v dead %v, want [false true] [2 0] [true false]", pub, attempts, dead)
	}
}

// Many events spread over five daily partitions (old and new), written in
// an order that interleaves the partitions, drain by claim and mark, in
// seq order per aggregate, each exactly once.
func TestPartitionedTableDrainsInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := timePartitionedDB(t, 4)
	const n = 3000
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload, created_at)
SELECT gen_random_uuid(), 'agg-' || (g % 37), 't', jsonb_build_object('n', g), now() - ((g * 7919) % 5) * interval '1 day'
FROM generate_series(1, $1) g`, n); err != nil {
		t.Fatal(err)
	}
	var parts int
	if err := db.Pool.QueryRow(ctx, `SELECT count(DISTINCT tableoid) FROM outbox`).Scan(&parts); err != nil || parts != 5 {
		t.Fatalf("events in %d partitions (%v), want 5", parts, err)
	}
	c := newClaimer(t, db.Pool, lease.Config{BatchSize: 100, RelayID: "r1"})
	last := map[string]int64{}
	seen := map[int64]bool{}
	deadline := time.Now().Add(time.Minute)
	for len(seen) < n && time.Now().Before(deadline) {
		b, err := c.Claim(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var s []int64
		for _, r := range b.Rows {
			if seen[r.Seq] {
				t.Fatalf("seq %d claimed twice", r.Seq)
			}
			seen[r.Seq] = true
			if r.Seq <= last[r.AggregateID] {
				t.Fatalf("aggregate %s: seq %d after %d", r.AggregateID, r.Seq, last[r.AggregateID])
			}
			last[r.AggregateID] = r.Seq
			s = append(s, r.Seq)
		}
		if len(s) > 0 {
			if m, err := c.MarkPublished(ctx, b.Token, s); err != nil || m != int64(len(s)) {
				t.Fatalf("mark %d rows: %d %v", len(s), m, err)
			}
		}
	}
	var left int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE published_at IS NULL`).Scan(&left); err != nil || left != 0 || len(seen) != n {
		t.Fatalf("%d claimed, %d left unpublished (%v), want %d and 0", len(seen), left, err, n)
	}
}
