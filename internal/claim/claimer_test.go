package claim_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/lease"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func addEvents(t *testing.T, pool outbox.Querier, aggs ...string) []uuid.UUID {
	t.Helper()
	var evs []outbox.Event
	var ids []uuid.UUID
	for i, a := range aggs {
		id := outbox.NewID()
		ids = append(ids, id)
		evs = append(evs, outbox.Event{ID: id, AggregateID: a, Type: "t", Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))})
	}
	if err := outbox.Add(context.Background(), pool, evs...); err != nil {
		t.Fatal(err)
	}
	return ids
}

func newClaimer(t *testing.T, pool *pgxpool.Pool, cfg lease.Config) *claim.Claimer {
	t.Helper()
	c, err := claim.New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ids(b *claim.Batch) []uuid.UUID {
	var out []uuid.UUID
	for _, r := range b.Rows {
		out = append(out, uuid.MustParse(r.ID))
	}
	return out
}

func seqs(b *claim.Batch) []int64 {
	var out []int64
	for _, r := range b.Rows {
		out = append(out, r.Seq)
	}
	return out
}

func TestClaimTakesLowestSeqUpToBatchSize(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	want := addEvents(t, db.Pool, "a", "b", "c", "d", "e", "f")
	c := newClaimer(t, db.Pool, lease.Config{BatchSize: 4, RelayID: "r1"})
	dbNow := func() time.Time {
		t.Helper()
		var now time.Time
		if err := db.Pool.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
			t.Fatal(err)
		}
		return now
	}
	before := dbNow()
	b1, err := c.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	after := dbNow()
	if got := ids(b1); fmt.Sprint(got) != fmt.Sprint(want[:4]) {
		t.Fatalf("first claim = %v, want %v", got, want[:4])
	}
	for i := 1; i < len(b1.Rows); i++ {
		if b1.Rows[i].Seq <= b1.Rows[i-1].Seq {
			t.Fatalf("rows not in seq order: %+v", b1.Rows)
		}
	}
	b2, err := c.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(b2); fmt.Sprint(got) != fmt.Sprint(want[4:]) {
		t.Fatalf("second claim = %v, want %v", got, want[4:])
	}
	b3, err := c.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(b3.Rows) != 0 {
		t.Fatalf("third claim got %d rows, want none (all leased)", len(b3.Rows))
	}
	// The lease end comes from the database clock: now() + 30s, now()
	// read between the two bracketing reads (not against a later read,
	// which a slow machine would put more than a few seconds later).
	if lo, hi := before.Add(lease.DefaultLease), after.Add(lease.DefaultLease); b1.LockedUntil.Before(lo) || b1.LockedUntil.After(hi) {
		t.Fatalf("locked_until %s, want the 30s lease from the database's now() during the claim: between %s and %s",
			b1.LockedUntil.Format(time.RFC3339Nano), lo.Format(time.RFC3339Nano), hi.Format(time.RFC3339Nano))
	}
}

func TestMarkAndReleaseAreFencedByClaimToken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	want := addEvents(t, db.Pool, "a", "b")
	c := newClaimer(t, db.Pool, lease.Config{RelayID: "r1"})
	b, err := c.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := c.MarkPublished(ctx, uuid.New(), seqs(b)); err != nil || n != 0 {
		t.Fatalf("mark with a foreign token: n=%d err=%v, want 0 rows", n, err)
	}
	if n, err := c.Release(ctx, claim.Settle{Token: uuid.New(), Seqs: seqs(b), CountAttempt: true, LastError: "x"}); err != nil || n != 0 {
		t.Fatalf("release with a foreign token: n=%d err=%v, want 0 rows", n, err)
	}
	if n, err := c.MarkPublished(ctx, b.Token, seqs(b)[:1]); err != nil || n != 1 {
		t.Fatalf("mark: n=%d err=%v, want 1", n, err)
	}
	if n, err := c.Release(ctx, claim.Settle{Token: b.Token, Seqs: seqs(b)[1:], CountAttempt: true, LastError: "broker said no"}); err != nil || n != 1 {
		t.Fatalf("release: n=%d err=%v, want 1", n, err)
	}
	var published *time.Time
	var attempts int
	var lastErr *string
	var lockedUntil *time.Time
	if err := db.Pool.QueryRow(ctx, "SELECT published_at FROM outbox WHERE id = $1", want[0]).Scan(&published); err != nil || published == nil {
		t.Fatalf("marked row: published_at=%v err=%v", published, err)
	}
	if err := db.Pool.QueryRow(ctx, "SELECT attempts, last_error, locked_until FROM outbox WHERE id = $1", want[1]).Scan(&attempts, &lastErr, &lockedUntil); err != nil {
		t.Fatal(err)
	}
	if attempts != 1 || lastErr == nil || *lastErr != "broker said no" || lockedUntil != nil {
		t.Fatalf("released row: attempts=%d last_error=%v locked_until=%v", attempts, lastErr, lockedUntil)
	}
	// Released with no delay: claimable again at once.
	b2, err := c.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(b2.Rows) != 1 || b2.Rows[0].ID != want[1].String() || b2.Rows[0].Attempts != 1 {
		t.Fatalf("re-claim = %+v, want the released row with attempts 1", b2.Rows)
	}
}

func TestExpiredLeaseIsReclaimedAndLateMarkDoesNotClobber(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	want := addEvents(t, db.Pool, "a", "b", "c")
	stalled := newClaimer(t, db.Pool, lease.Config{RelayID: "stalled", Lease: time.Second})
	other := newClaimer(t, db.Pool, lease.Config{RelayID: "other", Lease: time.Minute})
	b1, err := stalled.Claim(ctx)
	if err != nil || len(b1.Rows) != 3 {
		t.Fatalf("claim: %v rows=%d", err, len(b1.Rows))
	}
	var b2 *claim.Batch
	testenv.Eventually(t, 10*time.Second, func() bool {
		b2, err = other.Claim(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(b2.Rows) > 0
	}, "the expired lease was never re-claimed")
	if fmt.Sprint(ids(b2)) != fmt.Sprint(want) || b2.TakenOver != 3 {
		t.Fatalf("re-claim = %v (taken over %d), want %v, all 3 taken over", ids(b2), b2.TakenOver, want)
	}
	if n, err := stalled.MarkPublished(ctx, b1.Token, seqs(b2)); err != nil || n != 0 {
		t.Fatalf("late mark by the stalled relay: n=%d err=%v, want 0", n, err)
	}
	if n, err := stalled.Release(ctx, claim.Settle{Token: b1.Token, Seqs: seqs(b2), CountAttempt: true, LastError: "late"}); err != nil || n != 0 {
		t.Fatalf("late release by the stalled relay: n=%d err=%v, want 0", n, err)
	}
	if n, err := other.MarkPublished(ctx, b2.Token, seqs(b2)); err != nil || n != 3 {
		t.Fatalf("mark by the new holder: n=%d err=%v, want 3", n, err)
	}
}

// An aggregate's later event is never claimed while its earlier one is
// leased or backing off: not by another relay (it does not own the
// aggregate's key partition while the first relay holds it), not after the
// first relay left (the backoff blocks it), and a relay's own lease does
// not block its next claim.
func TestLaterEventsOfAnAggregateWaitForTheEarlierOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	want := addEvents(t, db.Pool, "x", "x", "y")
	r1 := newClaimer(t, db.Pool, lease.Config{RelayID: "r1", BatchSize: 1})
	r2 := newClaimer(t, db.Pool, lease.Config{RelayID: "r2"})
	b1, err := r1.Claim(ctx)
	if err != nil || len(b1.Rows) != 1 || b1.Rows[0].ID != want[0].String() {
		t.Fatalf("r1 claim: %v %+v", err, b1)
	}
	// x#2 must not go to r2 while r1 holds x#1.
	for range 3 {
		b2, err := r2.Claim(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// What a relay does with a batch it cannot publish: give it back.
		if _, err := r2.Release(ctx, claim.Settle{Token: b2.Token, Seqs: seqs(b2)}); err != nil {
			t.Fatal(err)
		}
		r2.Settled(b2.Token, time.Time{})
		for _, id := range ids(b2) {
			if id == want[1] {
				t.Fatalf("r2 claimed x#2 while r1 holds x#1")
			}
		}
	}
	// x#1 fails and backs off for an hour; r1 leaves, r2 owns everything:
	// x#2 stays unclaimable.
	if _, err := r1.Release(ctx, claim.Settle{Token: b1.Token, Seqs: seqs(b1), RetryIn: time.Hour, CountAttempt: true, LastError: "boom"}); err != nil {
		t.Fatal(err)
	}
	r1.Settled(b1.Token, time.Time{})
	if err := r1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		b, err := r2.Claim(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r2.Release(ctx, claim.Settle{Token: b.Token, Seqs: seqs(b)}); err != nil {
			t.Fatal(err)
		}
		r2.Settled(b.Token, time.Time{})
		for _, id := range ids(b) {
			if id == want[1] || id == want[0] {
				t.Fatalf("r2 claimed %v while x#1 backs off", ids(b))
			}
		}
	}
	if o := r2.Ownership(); o.Owned != o.Partitions || o.Members != 1 {
		t.Fatalf("after r1 left: r2 owns %+v, want every partition", o)
	}
	// Its own leases do not block a relay: a relay may hold x#1 and x#2
	// at once.
	if _, err := db.Pool.Exec(ctx, "UPDATE outbox SET locked_until = NULL WHERE id = $1", want[0]); err != nil {
		t.Fatal(err)
	}
	if err := r2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	r1b := newClaimer(t, db.Pool, lease.Config{RelayID: "r1", BatchSize: 1})
	a, err := r1b.Claim(ctx)
	if err != nil || len(a.Rows) != 1 || a.Rows[0].ID != want[0].String() {
		t.Fatalf("claim x#1: %v %v (ownership %+v)", err, a, r1b.Ownership())
	}
	b, err := r1b.Claim(ctx)
	if err != nil || len(b.Rows) != 1 || b.Rows[0].ID != want[1].String() {
		t.Fatalf("r1 claim of x#2 behind its own lease of x#1: %v %v", err, b)
	}
}

// Four relays claiming at once, as relays do (they keep claiming, so the
// key partitions move to their assigned owners as they rebalance): no
// claim returns more than the batch size, no row is claimed twice, and
// every row is claimed.
func TestClaimNeverReturnsMoreThanBatchSizeUnderConcurrency(t *testing.T) {
	t.Parallel()
	db := testenv.MigratedDB(t)
	aggs := make([]string, 300)
	for i := range aggs {
		aggs[i] = fmt.Sprint("agg-", i)
	}
	addEvents(t, db.Pool, aggs...)
	// A hang guard, started after the set-up and shorter than the lease:
	// no row's lease can end (and the row be claimed again) before it.
	const leaseFor = 10 * time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var mu sync.Mutex
	got := map[uuid.UUID]int{}
	errs := make(chan error, 4)
	for w := 0; w < 4; w++ {
		c := newClaimer(t, db.Pool, lease.Config{RelayID: fmt.Sprint("r", w), BatchSize: 7, Lease: leaseFor})
		go func() {
			for ctx.Err() == nil {
				b, err := c.Claim(ctx)
				if err != nil {
					errs <- err
					return
				}
				if len(b.Rows) > 7 {
					errs <- fmt.Errorf("claim returned %d rows, batch size 7", len(b.Rows))
					return
				}
				c.Settled(b.Token, time.Time{})
				mu.Lock()
				for _, id := range ids(b) {
					got[id]++
				}
				all := len(got) == 300
				mu.Unlock()
				if all {
					break
				}
				time.Sleep(time.Millisecond)
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 300 {
		t.Fatalf("claimed %d distinct rows, want 300", len(got))
	}
	for id, n := range got {
		if n != 1 {
			t.Fatalf("row %s claimed %d times", id, n)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		cfg  lease.Config
		want string
	}{
		{lease.Config{Lease: 10 * time.Millisecond}, "Config.Lease"},
		{lease.Config{BatchSize: -1}, "Config.BatchSize"},
		{lease.Config{BatchSize: lease.MaxBatchSize + 1}, "Config.BatchSize"},
		{lease.Config{Table: "a.b.c"}, "Config.Table"},
	} {
		err := tc.cfg.Validate()
		if err == nil || !contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// The claim's floor moves past published rows (so claims do not walk over
// their dead index entries) but never past a row whose inserting
// transaction is still open: it commits later and is still claimed.
func TestFloorSkipsPublishedRowsButNotLateCommits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	c := newClaimer(t, db.Pool, lease.Config{RelayID: "r1", BatchSize: 1000})
	publishAll := func() {
		t.Helper()
		b, err := c.Claim(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.MarkPublished(ctx, b.Token, seqs(b)); err != nil {
			t.Fatal(err)
		}
	}
	aggs := make([]string, 50)
	for i := range aggs {
		aggs[i] = fmt.Sprint("agg-", i)
	}
	addEvents(t, db.Pool, aggs...)
	publishAll()
	// max_connections is the floor's safety margin: give it seqs to pass.
	var margin int64
	if err := db.Pool.QueryRow(ctx, "SELECT current_setting('max_connections')::bigint").Scan(&margin); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, "SELECT setval(pg_get_serial_sequence('outbox', 'seq'), $1)", margin+100); err != nil {
		t.Fatal(err)
	}
	addEvents(t, db.Pool, aggs...)
	testenv.Eventually(t, 10*time.Second, func() bool {
		publishAll()
		return c.Floor() > 100
	}, "the floor never moved past published rows (floor %d)", c.Floor())

	// A transaction inserts and stays open; later events are published.
	late, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Rollback(ctx) //nolint:errcheck
	lateID := outbox.NewID()
	if err := outbox.Add(ctx, late, outbox.Event{ID: lateID, AggregateID: "late", Type: "t", Payload: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	var lateSeq int64
	if err := late.QueryRow(ctx, "SELECT seq FROM outbox WHERE id = $1", lateID).Scan(&lateSeq); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, "SELECT setval(pg_get_serial_sequence('outbox', 'seq'), $1)", lateSeq+margin+100); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		addEvents(t, db.Pool, aggs...)
		claimThroughAdvances(t, c, 3, publishAll)
	}
	if f := c.Floor(); f > lateSeq {
		t.Fatalf("floor %d passed seq %d of a row whose transaction is still open", f, lateSeq)
	}
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := c.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Rows) != 1 || b.Rows[0].ID != lateID.String() {
		t.Fatalf("after the late commit the claim got %v, want the late row %s", ids(b), lateID)
	}
}

// claimThroughAdvances calls claim until c has moved its floor n times
// (an advance runs at most every 100 ms, at a claim): a check that the
// floor did not pass a seq needs advances that would have passed it, not
// a time that a slow or a fast machine fills with more or fewer of them.
func claimThroughAdvances(t *testing.T, c *claim.Claimer, n int, claimNext func()) {
	t.Helper()
	seen, last := 0, claim.LastAdvance(c)
	testenv.Eventually(t, 30*time.Second, func() bool {
		claimNext()
		if at := claim.LastAdvance(c); !at.Equal(last) {
			seen, last = seen+1, at
		}
		return seen >= n
	}, "the floor did not advance %d times", n)
}

// holdSnapshot holds a REPEATABLE READ snapshot on a connection of pool,
// idle in its transaction, until the test ends.
func holdSnapshot(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	holder, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(holder.Release)
	if _, err := holder.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Exec(ctx, "ROLLBACK") }) //nolint:errcheck
	if _, err := holder.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
}

// A transaction that holds a snapshot and inserts nothing (an idle
// REPEATABLE READ session, a long report) does not hold the floor back:
// only a transaction that took seqs from the outbox's sequence can commit
// rows below it. Before, the floor waited for every transaction in the
// database, a claim walked every published row's dead index entry while
// VACUUM could not remove them, and claim time grew linearly (3 ms to
// 120-177 ms in four minutes at 1,000 events/s). A transaction that
// PREPAREd after taking a seq still holds it back.
func TestFloorIgnoresSnapshotHoldersButNotPreparedWriters(t *testing.T) {
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	c := newClaimer(t, db.Pool, lease.Config{RelayID: "r1", BatchSize: 1000})
	publishAll := func() {
		t.Helper()
		b, err := c.Claim(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.MarkPublished(ctx, b.Token, seqs(b)); err != nil {
			t.Fatal(err)
		}
	}
	aggs := make([]string, 20)
	for i := range aggs {
		aggs[i] = fmt.Sprint("agg-", i)
	}
	// The idle snapshot holder, opened before any event.
	holdSnapshot(t, db.Pool)
	for round := 0; round < 3; round++ {
		addEvents(t, db.Pool, aggs...)
	}
	var maxSeq int64
	if err := db.Pool.QueryRow(ctx, "SELECT max(seq) FROM outbox").Scan(&maxSeq); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		publishAll()
		return c.Floor() > maxSeq
	}, "the floor stayed at %d (max seq %d) while an idle snapshot was held", c.Floor(), maxSeq)

	// A prepared transaction that took a seq holds the floor below it,
	// until it commits.
	var prepared int
	if err := db.Pool.QueryRow(ctx, "SELECT current_setting('max_prepared_transactions')::int").Scan(&prepared); err != nil {
		t.Fatal(err)
	}
	if prepared == 0 {
		t.Log("max_prepared_transactions is 0: the prepared-transaction half is skipped")
		return
	}
	w, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Release()
	gid := "floor-" + db.Schema
	preparedID := outbox.NewID()
	for _, q := range []string{"BEGIN", fmt.Sprintf("INSERT INTO outbox (id, aggregate_id, event_type, payload) VALUES ('%s', 'prepared', 't', '{}')", preparedID), "PREPARE TRANSACTION '" + gid + "'"} {
		if _, err := w.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	defer db.Pool.Exec(ctx, "ROLLBACK PREPARED '"+gid+"'") //nolint:errcheck
	for i := 0; i < 5; i++ {
		addEvents(t, db.Pool, aggs...)
		claimThroughAdvances(t, c, 3, publishAll)
	}
	if f := c.Floor(); f > maxSeq+1 {
		t.Fatalf("floor %d passed the seq of a prepared transaction's row (above %d)", f, maxSeq)
	}
	if _, err := db.Pool.Exec(ctx, "COMMIT PREPARED '"+gid+"'"); err != nil {
		t.Fatal(err)
	}
	b, err := c.Claim(ctx)
	if err != nil || len(b.Rows) != 1 || b.Rows[0].ID != preparedID.String() {
		t.Fatalf("after COMMIT PREPARED the claim got %v (%v), want the prepared row", b, err)
	}
}

// The order guard's registry: claims register their relay, delayed releases
// and held dead letters extend 'holds', requeue shrinks it, Close
// deregisters a relay without leases.
func TestOrderGuardRegistry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	until := func(key string) (time.Time, bool) {
		var u time.Time
		var future bool
		err := db.Pool.QueryRow(ctx, "SELECT until, until > now() FROM outbox_order_guard WHERE key = $1", key).Scan(&u, &future)
		if err != nil {
			return time.Time{}, false
		}
		return u, future
	}
	want := addEvents(t, db.Pool, "a", "b")
	c := newClaimer(t, db.Pool, lease.Config{RelayID: "r1", BatchSize: 1})
	if !strings.HasPrefix(c.Holder(), "r1/") {
		t.Fatalf("holder %q", c.Holder())
	}
	b, err := c.Claim(ctx)
	if err != nil || len(b.Rows) != 1 {
		t.Fatal(err)
	}
	if _, future := until("relay:" + c.Holder()); !future {
		t.Fatal("the claim did not register its relay")
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, future := until("relay:" + c.Holder()); !future {
		t.Fatal("Close deregistered a relay that still holds a lease")
	}
	if _, err := c.Release(ctx, claim.Settle{Token: b.Token, Seqs: seqs(b), RetryIn: time.Hour, CountAttempt: true, LastError: "boom"}); err != nil {
		t.Fatal(err)
	}
	if _, future := until("holds"); !future {
		t.Fatal("a delayed release did not extend holds")
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := until("relay:" + c.Holder()); ok {
		t.Fatal("Close kept a relay without leases registered")
	}
	// Turn the backing-off row into a held dead letter, then requeue it.
	if _, err := db.Pool.Exec(ctx, "UPDATE outbox SET locked_until = NULL WHERE id = $1", want[0]); err != nil {
		t.Fatal(err)
	}
	b, err = c.Claim(ctx)
	if err != nil || len(b.Rows) != 1 || b.Rows[0].ID != want[0].String() {
		t.Fatalf("claim: %v %v", err, b)
	}
	if _, err := c.DeadLetter(ctx, claim.Settle{Token: b.Token, Seqs: seqs(b), Hold: true, CountAttempt: true, LastError: "rejected"}); err != nil {
		t.Fatal(err)
	}
	var forever bool
	if err := db.Pool.QueryRow(ctx, "SELECT until = 'infinity' FROM outbox_order_guard WHERE key = 'holds'").Scan(&forever); err != nil || !forever {
		t.Fatalf("holds after a held dead letter: infinity=%v err=%v", forever, err)
	}
	if n, err := c.Requeue(ctx, nil); err != nil || n != 1 {
		t.Fatalf("requeue: %d %v", n, err)
	}
	if _, future := until("holds"); future {
		t.Fatal("holds still in the future after the only dead letter was requeued")
	}
}

// TestClaimUpdatesStayOnTheirPage checks that the claim's update is a HOT
// update for every row of a full batch: each new row version lands on the
// page of the old one (the columns it sets are not indexed, so same page
// means HOT). Rows are claimed a whole page at a time, which needs the
// table's fillfactor of 40 (migration 00006): at 80 most of them moved, at 50
// up to a fifth of small rows.
func TestClaimUpdatesStayOnTheirPage(t *testing.T) {
	t.Parallel()
	for _, padding := range []int{0, 150, 1500} {
		t.Run(fmt.Sprintf("padding=%d", padding), func(t *testing.T) {
			t.Parallel()
			testClaimUpdatesStayOnTheirPage(t, padding)
		})
	}
}

func testClaimUpdatesStayOnTheirPage(t *testing.T, padding int) {
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	pad := strings.Repeat("x", padding)
	var evs []outbox.Event
	for i := range 400 {
		evs = append(evs, outbox.Event{AggregateID: fmt.Sprintf("agg-%d", i%37), Type: "t", Payload: json.RawMessage(fmt.Sprintf(`{"n":%d,"pad":%q}`, i, pad))})
	}
	if err := outbox.Add(ctx, db.Pool, evs...); err != nil {
		t.Fatal(err)
	}
	pages := func() map[uuid.UUID]string {
		rows, err := db.Pool.Query(ctx, `SELECT id, split_part(trim(both '()' from ctid::text), ',', 1) FROM outbox`)
		if err != nil {
			t.Fatal(err)
		}
		out := map[uuid.UUID]string{}
		for rows.Next() {
			var id uuid.UUID
			var page string
			if err := rows.Scan(&id, &page); err != nil {
				t.Fatal(err)
			}
			out[id] = page
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	before := pages()
	distinct := map[string]bool{}
	for _, p := range before {
		distinct[p] = true
	}
	if len(distinct) < 5 {
		t.Fatalf("400 rows on %d pages; the test needs several full pages", len(distinct))
	}
	// A Kubernetes pod name, as long as relay IDs usually get.
	c := newClaimer(t, db.Pool, lease.Config{BatchSize: 400, RelayID: "outbox-relay-7f9c5b6d8c-x2k4p"})
	b, err := c.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Rows) != 400 {
		t.Fatalf("claimed %d rows, want 400", len(b.Rows))
	}
	moved := 0
	for id, p := range pages() {
		if before[id] != p {
			moved++
		}
	}
	if moved > 0 {
		t.Fatalf("%d of 400 claimed rows moved to another page (not a HOT update) across %d pages", moved, len(distinct))
	}
}

// After ALTER SEQUENCE ... RESTART (a logical-replication cutover does not
// carry sequences over) new rows get seqs below the claim floor. The floor
// drops at the next advance that reads a sequence value below the last
// one it read, so they are claimed at once, not at the once-a-minute
// rescan (issue 20: 46.8-49.0 s after each insert), and its markers of
// the old sequence are dropped with it: a transaction that took a new,
// low seq and is still open holds the floor back as any other would.
func TestFloorDropsWhenTheSequenceRestarts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	c := newClaimer(t, db.Pool, lease.Config{RelayID: "restart", BatchSize: 1000})
	claimNext := func() *claim.Batch {
		t.Helper()
		b, err := c.Claim(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Rows) > 0 {
			if _, err := c.MarkPublished(ctx, b.Token, seqs(b)); err != nil {
				t.Fatal(err)
			}
			c.Settled(b.Token, time.Time{})
		}
		return b
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload)
SELECT gen_random_uuid(), 'agg-' || (g % 20), 't', '{}' FROM generate_series(1, 300) g`); err != nil {
		t.Fatal(err)
	}
	// The first claim is the rescan from seq 0; the next is due a minute
	// later, after this test.
	testenv.Eventually(t, 10*time.Second, func() bool {
		claimNext()
		return c.Floor() > 300
	}, "the floor never passed the published rows (floor %d)", c.Floor())
	before := c.Floor()

	if _, err := db.Pool.Exec(ctx, "ALTER SEQUENCE "+seqName(t, db)+" RESTART WITH 1"); err != nil {
		t.Fatal(err)
	}
	// A transaction takes seq 1 and stays open; seq 2 commits.
	open, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Rollback(ctx) //nolint:errcheck
	openIDs := addEvents(t, open, "late")
	committed := addEvents(t, db.Pool, "new")
	took := time.Now()
	testenv.Eventually(t, 5*time.Second, func() bool {
		b := claimNext()
		return len(b.Rows) == 1 && b.Rows[0].ID == committed[0].String()
	}, "the event committed after the restart was not claimed within 5 s (floor %d, was %d)", c.Floor(), before)
	t.Logf("floor %d before the restart; the new event claimed %s after its commit, floor now %d", before, time.Since(took).Round(time.Millisecond), c.Floor())
	// Several floor advances while seq 1 is taken and not committed.
	claimThroughAdvances(t, c, 5, func() { claimNext() })
	if f := c.Floor(); f > 1 {
		t.Fatalf("floor %d passed seq 1, taken after the restart by a transaction still open", f)
	}
	if err := open.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, func() bool {
		b := claimNext()
		return len(b.Rows) == 1 && b.Rows[0].ID == openIDs[0].String()
	}, "the event of the transaction open across the restart was not claimed within 5 s of its commit (floor %d)", c.Floor())
}

// seqName is the outbox table's seq sequence, quoted.
func seqName(t *testing.T, db *testenv.TestDB) string {
	t.Helper()
	var name string
	if err := db.Pool.QueryRow(context.Background(), "SELECT pg_get_serial_sequence('outbox', 'seq')").Scan(&name); err != nil {
		t.Fatal(err)
	}
	return name
}
