package claim

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/lease"
)

func TestResumeDecisions(t *testing.T) {
	t.Parallel()
	now := time.Now()
	full := scanState{full: true, quiet: true, final: 10_000}
	held := scanState{quiet: true, holds: true, final: 10_000}
	with := func(s scanState, f func(*scanState)) scanState { f(&s); return s }
	cases := []struct {
		name  string
		last  int64
		s     scanState
		floor int64
		want  int64 // where the next claim scans from
	}{
		{"full and quiet: after the last row", 500, full, 1, 501},
		{"not full: the scan reached the end", 500, with(full, func(s *scanState) { s.full = false }), 1, 1},
		{"a lease of an earlier holder runs", 500, with(full, func(s *scanState) { s.quiet = false }), 1, 1},
		{"no seq known final yet", 500, with(full, func(s *scanState) { s.final = -1 }), 1, 1},
		{"no further than the last final seq", 500, with(full, func(s *scanState) { s.final = 300 }), 1, 301},
		{"the floor passed the resume point", 500, full, 900, 900},
		{"held rows, not full: after the last final seq", 500, held, 1, 10_001},
		{"held rows, full: after the last row", 500, with(held, func(s *scanState) { s.full = true }), 1, 501},
		{"held rows and a row backs off", 500, with(held, func(s *scanState) { s.backoff = true }), 1, 1},
		{"held rows, no seq known final", 500, with(held, func(s *scanState) { s.final = -1 }), 1, 1},
		{"held rows, a lease of an earlier holder runs", 500, with(held, func(s *scanState) { s.quiet = false }), 1, 1},
	}
	for _, tc := range cases {
		var r resume
		r.claimed(tc.last, tc.s, now)
		if got := r.from(tc.floor); got != tc.want {
			t.Errorf("%s: scans from %d, want %d", tc.name, got, tc.want)
		}
		if r.guarded != (tc.s.holds && tc.want > tc.floor) {
			t.Errorf("%s: guarded %v", tc.name, r.guarded)
		}
	}

	// A guarded run ends when a requeue is seen, and when the holds end
	// (the claims from its point ran the guard; the next must scan from
	// the floor, where the requeued rows are).
	for name, next := range map[string]scanState{
		"requeued":    with(held, func(s *scanState) { s.requeued = 7 }),
		"holds ended": with(held, func(s *scanState) { s.holds, s.full = false, true }),
	} {
		var r resume
		r.claimed(500, held, now)
		r.claimed(600, next, now)
		if r.from(1) != 1 || r.guarded {
			t.Errorf("%s: scans from %d, guarded %v", name, r.from(1), r.guarded)
		}
	}

	// A run of resumed claims is bounded: the maxResumed+1-th claim scans
	// from the floor again, and the run starts over.
	var r resume
	for i := range maxResumed {
		r.claimed(int64(100*(i+1)), full, now)
		if r.from(1) != int64(100*(i+1)+1) {
			t.Fatalf("claim %d: scans from %d", i+1, r.from(1))
		}
	}
	r.claimed(100*(maxResumed+1), full, now)
	if r.from(1) != 1 {
		t.Fatalf("after %d resumed claims the next scans from %d, want the floor", maxResumed, r.from(1))
	}
	r.claimed(5, full, now)
	if r.from(1) != 6 {
		t.Fatalf("a new run does not resume: %d", r.from(1))
	}

	// ... and lasts at least floorCostFactor times the last scan from the
	// floor: one over held rows that took a second keeps the run going
	// for 20 s, however many claims.
	r = resume{}
	r.claimed(0, with(held, func(s *scanState) { s.fromFloor, s.took = true, time.Second }), now)
	for i := range 3 * maxResumed {
		r.claimed(0, held, now.Add(time.Duration(i)*100*time.Millisecond))
		if r.from(1) != 10_001 {
			t.Fatalf("claim %d, %v into the run: scans from %d", i+1, time.Duration(i)*100*time.Millisecond, r.from(1))
		}
	}
	r.claimed(0, held, now.Add(floorCostFactor*time.Second))
	if r.from(1) != 1 {
		t.Fatalf("after %v the next claim scans from %d, want the floor", floorCostFactor*time.Second, r.from(1))
	}
}

// insertRows inserts n events over aggs aggregates in one statement.
func insertRows(t *testing.T, pool *pgxpool.Pool, n, aggs int) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `INSERT INTO outbox (id, aggregate_id, event_type, payload)
SELECT gen_random_uuid(), 'agg-' || (g % $2), 't', '{}' FROM generate_series(1, $1) g`, n, aggs); err != nil {
		t.Fatal(err)
	}
}

// drainUntilResumed claims (keeping every batch in flight) until a claim
// scans from just after the previous claim's last row, and returns the
// batches claimed, the resumed one last. It fails the test if none does
// within the backlog or 10 s.
func drainUntilResumed(t *testing.T, c *Claimer) []*Batch {
	t.Helper()
	ctx := context.Background()
	var out []*Batch
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		b, err := c.Claim(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Rows) == 0 {
			t.Fatalf("the backlog ran out after %d claims, none resumed", len(out))
		}
		if len(out) > 0 {
			prev := out[len(out)-1].Rows
			if c.fl.scanFrom == prev[len(prev)-1].Seq+1 {
				return append(out, b)
			}
		}
		out = append(out, b)
	}
	t.Fatalf("no claim resumed after the previous one's last row in %d claims", len(out))
	return nil
}

// release gives the first n rows of b back (at once, or after retryIn).
func release(t *testing.T, c *Claimer, b *Batch, n int, retryIn time.Duration) {
	t.Helper()
	s := Settle{Token: b.Token, RetryIn: retryIn}
	for _, r := range b.Rows[:n] {
		s.Seqs = append(s.Seqs, r.Seq)
	}
	if _, err := c.Release(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	c.Settled(b.Token, time.Time{})
}

// A relay draining a backlog scans from after its last claimed row, not
// from the floor over the rows it has in flight; a row it gives back makes
// the next claim scan from the floor again, so the given-back row comes
// before the later rows of its aggregate.
func TestClaimResumesAfterItsLastRowWhileDraining(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	insertRows(t, db.Pool, 40_000, 10)
	c, err := New(db.Pool, lease.Config{RelayID: "r", BatchSize: 50})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(ctx) }()
	batches := drainUntilResumed(t, c)
	resumed := batches[len(batches)-1]
	prev := batches[len(batches)-2].Rows
	if resumed.Rows[0].Seq <= prev[len(prev)-1].Seq {
		t.Fatalf("the resumed claim took seq %d, not after %d", resumed.Rows[0].Seq, prev[len(prev)-1].Seq)
	}
	t.Logf("claim %d scanned from %d (floor %d)", len(batches), c.fl.scanFrom, c.fl.at)

	// Give the first batch back: the next claim scans from the floor and
	// takes those rows first.
	first := batches[0]
	release(t, c, first, len(first.Rows), 0)
	b, err := c.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c.fl.scanFrom > first.Rows[0].Seq {
		t.Fatalf("after a release the claim scanned from %d, above the released seq %d", c.fl.scanFrom, first.Rows[0].Seq)
	}
	if len(b.Rows) == 0 || b.Rows[0].Seq != first.Rows[0].Seq {
		t.Fatalf("after a release the claim's first row is %v, want the released seq %d", seqs(b), first.Rows[0].Seq)
	}
}

func seqs(b *Batch) []int64 {
	var out []int64
	for _, r := range b.Rows {
		out = append(out, r.Seq)
	}
	return out
}

// While a row backs off, its later rows are held by the order guard; when
// its delay ends it is claimable again without the relay doing anything,
// so no claim may have skipped it: claims do not resume while 'holds' is
// set.
func TestClaimDoesNotResumeWhileARowBacksOff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	insertRows(t, db.Pool, 40_000, 1000)
	c, err := New(db.Pool, lease.Config{RelayID: "r", BatchSize: 50})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(ctx) }()
	batches := drainUntilResumed(t, c)
	release(t, c, batches[0], 1, time.Hour)
	for i := range 5 {
		b, err := c.Claim(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Rows) < c.cfg.BatchSize {
			t.Fatalf("claim %d took %d rows", i, len(b.Rows))
		}
		if c.fl.scanFrom != c.fl.at {
			t.Fatalf("claim %d, a row backing off: scanned from %d, not from the floor %d", i, c.fl.scanFrom, c.fl.at)
		}
	}
}

// A transaction that took a seq and has not committed may still commit a
// row there: claims resume no further than that seq, so the row is found
// as soon as it commits.
func TestClaimResumesNoFurtherThanAnOpenWriter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	insertRows(t, db.Pool, 1_000, 10)
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var late int64
	if err := tx.QueryRow(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload)
VALUES (gen_random_uuid(), 'late', 't', '{}') RETURNING seq`).Scan(&late); err != nil {
		t.Fatal(err)
	}
	insertRows(t, db.Pool, 40_000, 10)
	c, err := New(db.Pool, lease.Config{RelayID: "r", BatchSize: 50})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(ctx) }()
	// Claim through at least three floor advances, every batch kept in
	// flight: none may scan past the open writer's seq.
	advances, last := 0, c.fl.lastAdvance
	for claims := 0; advances < 3; claims++ {
		b, err := c.Claim(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Rows) == 0 {
			t.Fatalf("the backlog ran out after %d claims and %d advances", claims, advances)
		}
		if c.fl.scanFrom > late {
			t.Fatalf("claim %d scanned from %d, past the open writer's seq %d", claims+1, c.fl.scanFrom, late)
		}
		if c.fl.lastAdvance != last {
			advances, last = advances+1, c.fl.lastAdvance
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		b, err := c.Claim(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("claim %d after the commit scanned from %d (floor %d): %d rows from seq %d", i+1, c.fl.scanFrom, c.fl.at, len(b.Rows), b.Rows[0].Seq)
		for _, r := range b.Rows {
			if r.Seq == late {
				t.Logf("the late row was claimed %d claims after its commit", i+1)
				return
			}
		}
		if len(b.Rows) == 0 {
			t.Fatalf("the late row %d was never claimed", late)
		}
	}
}
