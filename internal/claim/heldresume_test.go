package claim

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/lease"
)

// heldClaimer returns a migrated database and a Claimer on it (relay ID
// "r", batches of 50, cfg's lease), closed when the test ends.
func heldClaimer(t *testing.T, cfg lease.Config) (*testenv.TestDB, *Claimer) {
	t.Helper()
	db := testenv.MigratedDB(t)
	cfg.RelayID, cfg.BatchSize = "r", 50
	c, err := New(db.Pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return db, c
}

// heldBacklog dead-letters, with hold, the first event of aggregate 'hot'
// and writes n more events of it behind: they are held. It returns the
// dead letter's seq and the last held seq.
func heldBacklog(t testing.TB, c *Claimer, pool *pgxpool.Pool, n int) (dead, last int64) {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload) VALUES (gen_random_uuid(), 'hot', 't', '{}')`); err != nil {
		t.Fatal(err)
	}
	b, err := c.Claim(ctx)
	if err != nil || len(b.Rows) != 1 {
		t.Fatalf("claim of the first event: %v, %v", b, err)
	}
	if n, err := c.DeadLetter(ctx, Settle{Token: b.Token, Seqs: seqs(b), Hold: true, LastError: "refused"}); err != nil || n != 1 {
		t.Fatalf("dead-letter: %d, %v", n, err)
	}
	c.Settled(b.Token, time.Time{})
	if err := pool.QueryRow(ctx, `WITH w AS (INSERT INTO outbox (id, aggregate_id, event_type, payload)
SELECT gen_random_uuid(), 'hot', 't', '{}' FROM generate_series(1, $1) RETURNING seq) SELECT max(seq) FROM w`, n).Scan(&last); err != nil {
		t.Fatal(err)
	}
	return b.Rows[0].Seq, last
}

// claimOthers writes 3 events of other aggregates, claims, marks what it
// claimed published, and returns the claimed rows' aggregates and seqs in
// claim order.
func claimOthers(t testing.TB, c *Claimer, pool *pgxpool.Pool, round int) []Row {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload)
SELECT gen_random_uuid(), 'other-' || $1::int || '-' || g, 't', '{}' FROM generate_series(1, 3) g`, round); err != nil {
		t.Fatal(err)
	}
	b, err := c.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Rows) > 0 {
		if n, err := c.MarkPublished(ctx, b.Token, seqs(b)); err != nil || n != int64(len(b.Rows)) {
			t.Fatalf("mark: %d of %d, %v", n, len(b.Rows), err)
		}
	}
	c.Settled(b.Token, time.Time{})
	return b.Rows
}

// hotOrder checks that the 'hot' rows are claimed in seq order, the
// requeued dead letter first.
type hotOrder struct {
	t          *testing.T
	dead, prev int64
	claimed    int
}

func (h *hotOrder) see(rows []Row) {
	h.t.Helper()
	for _, r := range rows {
		if r.AggregateID != "hot" {
			continue
		}
		if (h.claimed == 0 && r.Seq != h.dead) || r.Seq <= h.prev {
			h.t.Fatalf("claimed hot seq %d after %d (%d claimed; the dead letter is %d): out of order", r.Seq, h.prev, h.claimed, h.dead)
		}
		h.prev = r.Seq
		h.claimed++
	}
}

// resumePastHeld claims other aggregates' events until a claim scans from
// past the held rows (up to last), failing on any 'hot' row claimed.
func resumePastHeld(t testing.TB, c *Claimer, pool *pgxpool.Pool, last int64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // a hang guard
	for round := 0; c.fl.scanFrom <= last; round++ {
		if time.Now().After(deadline) {
			t.Fatalf("no claim resumed past the held rows in %d claims: scans from %d, floor %d", round, c.fl.scanFrom, c.fl.at)
		}
		for _, r := range claimOthers(t, c, pool, round) {
			if r.AggregateID == "hot" {
				t.Fatalf("claimed held row %d", r.Seq)
			}
		}
	}
}

// A large backlog behind a held dead letter is walked once, not by every
// claim: claims resume past it, and the other aggregates' events flow; a
// requeue (any relay's) makes the next claim scan from the floor, and the
// requeued event comes first, its aggregate's later events after it in
// order.
func TestClaimResumesPastHeldRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, c := heldClaimer(t, lease.Config{})
	dead, last := heldBacklog(t, c, db.Pool, 5_000)
	resumePastHeld(t, c, db.Pool, last)
	for round := range 5 {
		if rows := claimOthers(t, c, db.Pool, 1000+round); len(rows) != 3 {
			t.Fatalf("a resumed claim took %d rows, want the 3 new", len(rows))
		}
		if c.fl.scanFrom <= last {
			t.Fatalf("claim %d scanned from %d, over the held rows up to %d", round, c.fl.scanFrom, last)
		}
	}

	// Requeued by another process (outbox-relay requeue).
	ops, err := New(db.Pool, lease.Config{RelayID: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := ops.Requeue(ctx, nil); err != nil || n != 1 {
		t.Fatalf("requeue: %d, %v", n, err)
	}
	h := &hotOrder{t: t, dead: dead}
	for round := 0; h.claimed < int(last-dead)+1; round++ {
		h.see(claimOthers(t, c, db.Pool, 2000+round))
		if round == 0 && h.claimed == 0 {
			t.Fatalf("the claim after a requeue scanned from %d and did not take the requeued seq %d", c.fl.scanFrom, dead)
		}
		if round > 1000 {
			t.Fatalf("after 1000 claims %d of the %d hot events are claimed", h.claimed, last-dead+1)
		}
	}
}

// A dead letter made claimable by hand in SQL (no requeue marker) below a
// resume point delays its aggregate's later events until a claim scans from
// the floor; it never lets them pass it.
func TestClaimResumedPastHeldRowsKeepsOrderAfterARequeueByHand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, c := heldClaimer(t, lease.Config{})
	dead, last := heldBacklog(t, c, db.Pool, 2_000)
	resumePastHeld(t, c, db.Pool, last)
	if _, err := db.Pool.Exec(ctx, `UPDATE outbox SET dead_lettered_at = NULL, locked_until = NULL, attempts = 0 WHERE seq = $1`, dead); err != nil {
		t.Fatal(err)
	}
	// Later events of the aggregate, above the resume point.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload) SELECT gen_random_uuid(), 'hot', 't', '{}' FROM generate_series(1, 3)`); err != nil {
		t.Fatal(err)
	}
	h, resumed := &hotOrder{t: t, dead: dead}, 0
	deadline := time.Now().Add(3 * time.Minute) // a hang guard: the rescan comes within a minute
	for round := 0; h.claimed < int(last-dead)+4; round++ {
		if time.Now().After(deadline) {
			t.Fatalf("%d of the %d hot events are claimed after %d claims", h.claimed, last-dead+4, round)
		}
		rows := claimOthers(t, c, db.Pool, round)
		if h.claimed == 0 && c.fl.scanFrom > dead {
			resumed++
		}
		h.see(rows)
	}
	if resumed == 0 {
		t.Fatal("no claim resumed past the requeued row: the test tested nothing")
	}
	t.Logf("%d resumed claims passed over the requeued row before a claim from the floor took it", resumed)
}

// While a row backs off, a row held behind a dead letter is no reason to
// resume: the backing-off row turns claimable by itself.
func TestClaimDoesNotResumePastHeldRowsWhileARowBacksOff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, c := heldClaimer(t, lease.Config{})
	_, last := heldBacklog(t, c, db.Pool, 2_000)
	resumePastHeld(t, c, db.Pool, last)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload) VALUES (gen_random_uuid(), 'slow', 't', '{}')`); err != nil {
		t.Fatal(err)
	}
	b, err := c.Claim(ctx)
	if err != nil || len(b.Rows) != 1 {
		t.Fatalf("claim: %v, %v", b, err)
	}
	release(t, c, b, 1, time.Hour)
	for round := range 5 {
		claimOthers(t, c, db.Pool, 100+round)
		if c.fl.scanFrom != c.fl.at {
			t.Fatalf("claim %d, a row backing off: scanned from %d, not from the floor %d", round, c.fl.scanFrom, c.fl.at)
		}
	}
}

// BenchmarkClaimBesideHeldRows measures a claim of 3 new events while
// 100,000 events of another aggregate wait behind its held dead letter,
// once claims resume past them (each op also writes the 3 events and marks
// them, outside the timer). floor-scan-ms is what the first claim, which
// walks the held rows, took: a claim from the floor costs that at most
// once per floorCostFactor times as long.
func BenchmarkClaimBesideHeldRows(b *testing.B) {
	ctx := context.Background()
	db := testenv.MigratedDB(b)
	c, err := New(db.Pool, lease.Config{RelayID: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	_, last := heldBacklog(b, c, db.Pool, 100_000)
	if _, err := db.Pool.Exec(ctx, `VACUUM ANALYZE outbox`); err != nil {
		b.Fatal(err)
	}
	began := time.Now()
	claimOthers(b, c, db.Pool, -1)
	floorScan := time.Since(began)
	resumePastHeld(b, c, db.Pool, last)
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload)
SELECT gen_random_uuid(), 'other-' || $1::int || '-' || g, 't', '{}' FROM generate_series(1, 3) g`, i); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		batch, err := c.Claim(ctx)
		b.StopTimer()
		if err != nil || len(batch.Rows) != 3 {
			b.Fatalf("claimed %v, %v", batch, err)
		}
		if _, err := c.MarkPublished(ctx, batch.Token, seqs(batch)); err != nil {
			b.Fatal(err)
		}
		c.Settled(batch.Token, time.Time{})
		b.StartTimer()
	}
	b.ReportMetric(float64(floorScan.Microseconds())/1000, "floor-scan-ms")
}

// While rows are held behind a dead letter, the claim probes the order
// guard by rows (claimHeld): a claim of 3 new events from past 20,000 held
// rows reads a few buffers per event, whatever the statistics make of the
// held aggregate. With scalar bounds the generic plan probed the seq index
// and walked every held row for each new event.
func TestClaimBesideHeldRowsProbesByRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, c := heldClaimer(t, lease.Config{})
	dead, last := heldBacklog(t, c, db.Pool, 20_000)
	if _, err := db.Pool.Exec(ctx, `ANALYZE outbox`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload)
SELECT gen_random_uuid(), 'other-' || g, 't', '{}' FROM generate_series(1, 3) g`); err != nil {
		t.Fatal(err)
	}
	a := claimArgs{BatchSize: c.cfg.BatchSize, LeaseMS: c.cfg.Lease.Milliseconds(), Holder: c.holder.Load(), Token: uuid.New(),
		ScanFrom: last + 1, Floor: dead, Member: c.own.member, Owned: c.own.claimMask, OwnsAny: c.own.claimsAny,
		Generation: c.own.generation, ForceGuard: true, MaxBytes: int32(c.cfg.MaxBatchBytes)}
	byRow := explainBuffers(t, c, c.rows.claimHeld.SQL, c.rows.claimHeld.Args(a)...)
	scalar := explainBuffers(t, c, c.rows.claim.SQL, c.rows.claim.Args(a)...)
	t.Logf("a claim of 3 events past 20,000 held rows touched %d buffers probing by rows, %d with scalar bounds", byRow, scalar)
	if byRow > 500 {
		t.Fatalf("a claim of 3 events past 20,000 held rows touched %d buffers: its probes walk the held rows", byRow)
	}
	if !c.heldNow.Load() && !c.heldSeen {
		t.Fatal("after a dead-lettering with hold the next claim would not probe by rows")
	}
}

// A relay paused past its membership (a GC pause, SIGSTOP, a frozen VM)
// with a batch in its pipeline finds that batch's lease gone: Extend
// renews nothing and the relay drops the batch. Whichever comes first
// after the pause, that Extend or the next claim (whose rebalance renews
// the membership), the dropped event must be claimed before the later
// events of its aggregate: no claim may resume past it.
func TestClaimAfterAPausePastItsMembershipTakesTheDroppedEventFirst(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		held        bool // resumed past rows held behind a dead letter, or draining a backlog
		extendFirst bool
	}{
		{"held/extend-first", true, true},
		{"held/claim-first", true, false},
		{"backlog/extend-first", false, true},
		{"backlog/claim-first", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			const leaseFor = 2 * time.Second
			db, c := heldClaimer(t, lease.Config{Lease: leaseFor})
			var x1 int64
			if tc.held {
				_, last := heldBacklog(t, c, db.Pool, 200)
				resumePastHeld(t, c, db.Pool, last)
			}
			if err := db.Pool.QueryRow(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload) VALUES (gen_random_uuid(), 'x', 't', '{}') RETURNING seq`).Scan(&x1); err != nil {
				t.Fatal(err)
			}
			var b1 *Batch // x1's batch, kept in the pipeline
			var err error
			if tc.held {
				if b1, err = c.Claim(ctx); err != nil || len(b1.Rows) != 1 || b1.Rows[0].Seq != x1 {
					t.Fatalf("claim of x1: %v, %v", b1, err)
				}
				// Resume past x1 too.
				deadline := time.Now().Add(time.Minute) // a hang guard
				for round := 0; c.fl.scanFrom <= x1; round++ {
					if time.Now().After(deadline) {
						t.Fatalf("no claim resumed past x1 %d: scans from %d", x1, c.fl.scanFrom)
					}
					claimOthers(t, c, db.Pool, 100+round)
				}
			} else {
				insertRows(t, db.Pool, 5_000, 10)
				batches := drainUntilResumed(t, c)
				if b1 = batches[0]; b1.Rows[0].Seq != x1 {
					t.Fatalf("the first batch starts at %d, not x1 %d", b1.Rows[0].Seq, x1)
				}
				for _, b := range batches[1:] {
					if _, err := c.MarkPublished(ctx, b.Token, seqs(b)); err != nil {
						t.Fatal(err)
					}
					c.Settled(b.Token, time.Time{})
				}
			}
			if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload) VALUES (gen_random_uuid(), 'x', 't', '{}')`); err != nil {
				t.Fatal(err)
			}
			time.Sleep(leaseFor + leaseFor/4) // the pause: past the lease and the membership

			drop := func() {
				kept, _, err := c.Extend(ctx, b1.Token, seqs(b1))
				if err != nil || len(kept) != 0 {
					t.Fatalf("extend after the pause kept %v, %v: want nothing", kept, err)
				}
				c.Settled(b1.Token, time.Time{})
			}
			if tc.extendFirst {
				drop()
			}
			for round := 0; ; round++ {
				b, err := c.Claim(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if !tc.extendFirst && round == 0 {
					t.Logf("claim 0 after the pause scanned from %d (floor %d): %v", c.fl.scanFrom, c.fl.at, seqs(b))
					drop()
				}
				for _, r := range b.Rows {
					if r.AggregateID != "x" {
						continue
					}
					if r.Seq != x1 {
						t.Fatalf("claim %d took x's seq %d before the dropped x1 %d", round, r.Seq, x1)
					}
					return
				}
				if _, err := c.MarkPublished(ctx, b.Token, seqs(b)); err != nil {
					t.Fatal(err)
				}
				c.Settled(b.Token, time.Time{})
				if round > 200 {
					t.Fatalf("x1 %d not claimed again in 200 claims", x1)
				}
			}
		})
	}
}
