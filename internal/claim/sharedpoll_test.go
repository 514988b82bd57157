package claim_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/lease"
)

// Two relays' claimers on one table, 40 events of both relays' key
// partitions written without a notification: a claim after PollShared
// takes the claiming relay's rows and, at its commit, notifies the
// channel once, naming exactly the other relay's partitions among those
// events ("poll:kp:..."); WokeOwners counts them. Once the other relay
// has claimed its rows, a shared poll finds nothing more to wake it for.
func TestSharedPollWakesTheOtherOwners(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	a, b, channel := twoPollingClaimers(t, db)

	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload)
SELECT gen_random_uuid(), 'agg-' || g, 't', '{}' FROM generate_series(0, 39) g`); err != nil {
		t.Fatal(err)
	}
	var wantB []int
	if err := db.Pool.QueryRow(ctx, `SELECT coalesce(array_agg(DISTINCT outbox_key_partition('agg-' || g) ORDER BY outbox_key_partition('agg-' || g)), '{}')
FROM generate_series(0, 39) g WHERE outbox_key_partition('agg-' || g) IN (SELECT partition FROM outbox_partitions WHERE owner = $1)`,
		b.Member()).Scan(&wantB); err != nil {
		t.Fatal(err)
	}
	if len(wantB) == 0 {
		t.Fatal("no event in b's partitions: the test proves nothing")
	}

	lc, err := pgx.Connect(ctx, db.ConnString)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close(ctx)
	if _, err := lc.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		t.Fatal(err)
	}

	a.PollShared()
	batch, err := a.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(batch.Rows) == 0 || len(batch.Rows) == 40 {
		t.Fatalf("a's shared poll claimed %d of the 40 events, want its own share", len(batch.Rows))
	}
	for _, r := range batch.Rows {
		if slices.Contains(wantB, r.KeyPartition) {
			t.Fatalf("a claimed a row of b's partition %d", r.KeyPartition)
		}
	}
	if batch.WokeOwners != len(wantB) {
		t.Errorf("WokeOwners %d, want %d (b's partitions among the events)", batch.WokeOwners, len(wantB))
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	n, err := lc.WaitForNotification(wctx)
	if err != nil {
		t.Fatalf("no notification after the shared poll: %v", err)
	}
	names := make([]string, len(wantB))
	for i, p := range wantB {
		names[i] = strconv.Itoa(p)
	}
	if want := "poll:kp:" + strings.Join(names, ","); n.Payload != want {
		t.Fatalf("shared poll notified %q, want %q", n.Payload, want)
	}

	bb, err := b.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(bb.Rows)+len(batch.Rows) != 40 {
		t.Fatalf("b claimed %d rows, a %d: want the 40 between them", len(bb.Rows), len(batch.Rows))
	}
	a.PollShared()
	again, err := a.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again.WokeOwners != 0 || len(again.Rows) != 0 {
		t.Fatalf("a shared poll with every event leased took %d rows and woke %d partitions' owners, want none", len(again.Rows), again.WokeOwners)
	}
}

// twoPollingClaimers returns two claimers on db's table, with a wake
// channel, once they have split its key partitions and hold poll turns
// of their own.
func twoPollingClaimers(t *testing.T, db *testenv.TestDB) (a, b *claim.Claimer, channel string) {
	t.Helper()
	ctx := context.Background()
	channel = "poll_" + db.Schema // channels are per database, schemas per test
	a = newClaimer(t, db.Pool, lease.Config{RelayID: "a"})
	b = newClaimer(t, db.Pool, lease.Config{RelayID: "b"})
	for _, c := range []*claim.Claimer{a, b} {
		c.SetWakeChannel(channel)
	}
	// Settled: two rounds in a row in which no claim saw the generation
	// move (a move by the second claimer shows in the first's next claim).
	quiet := 0
	settled := func() bool {
		more := false
		for _, c := range []*claim.Claimer{a, b} {
			batch, err := c.Claim(ctx)
			if err != nil {
				t.Fatal(err)
			}
			more = more || batch.More // the generation moved: rebalance again
		}
		oa, ob := a.Ownership(), b.Ownership()
		if quiet++; more {
			quiet = 0
		}
		return quiet >= 2 && oa.Members == 2 && ob.Members == 2 && oa.Releasing+ob.Releasing == 0 && oa.Owned+ob.Owned == oa.Partitions && oa.Owned > 0 && ob.Owned > 0
	}
	testenv.Eventually(t, 30*time.Second, settled, "the two claimers did not split the key partitions")
	if oa, ob := a.Ownership(), b.Ownership(); oa.Turn == ob.Turn {
		t.Fatalf("both members have poll turn %d", oa.Turn)
	}

	return a, b, channel
}

// A shared poll wakes the owners of claimable rows behind a long run of
// held ones: 600 events of one aggregate wait behind its dead letter
// (held, 'holds' in the order guard), more than a claim's batch, and 10
// events of the other relay's partitions come after them. The poll names
// those partitions; the held rows, which no owner could claim, do not
// hide them.
func TestSharedPollSeesPastHeldRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	a, b, _ := twoPollingClaimers(t, db)
	if n := a.Config().BatchSize; n >= 600 {
		t.Fatalf("batch size %d: 600 held rows would not fill the poll's scan", n)
	}
	ownedAgg := func(owner string, not string) string {
		var agg string
		if err := db.Pool.QueryRow(ctx, `SELECT 'agg-' || g FROM generate_series(0, 999) g
WHERE outbox_key_partition('agg-' || g) IN (SELECT partition FROM outbox_partitions WHERE owner = $1) AND 'agg-' || g <> $2 LIMIT 1`, owner, not).Scan(&agg); err != nil {
			t.Fatal(err)
		}
		return agg
	}
	held, other := ownedAgg(a.Member(), ""), ownedAgg(b.Member(), "")
	insert := func(agg string, n int) {
		if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload) SELECT gen_random_uuid(), $1, 't', '{}' FROM generate_series(1, $2)`, agg, n); err != nil {
			t.Fatal(err)
		}
	}
	insert(held, 1)
	first, err := a.Claim(ctx)
	if err != nil || len(first.Rows) != 1 {
		t.Fatalf("claim of the first event: %d rows, %v", len(first.Rows), err)
	}
	if _, err := a.DeadLetter(ctx, claim.Settle{Token: first.Token, Seqs: []int64{first.Rows[0].Seq}, Hold: true, CountAttempt: true, LastError: "rejected"}); err != nil {
		t.Fatal(err)
	}
	insert(held, 600)
	insert(other, 10)

	a.PollShared()
	batch, err := a.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(batch.Rows) != 0 {
		t.Fatalf("a claimed %d rows held behind its dead letter", len(batch.Rows))
	}
	if batch.WokeOwners != 1 {
		t.Fatalf("the shared poll woke %d partitions' owners, want 1 (%s's, behind 600 held rows)", batch.WokeOwners, other)
	}
	bb, err := b.Claim(ctx)
	if err != nil || len(bb.Rows) != 10 {
		t.Fatalf("b claimed %d rows (%v), want its 10", len(bb.Rows), err)
	}
}

// A shared poll sees the other relays' rows below its own floor: the
// floor is computed over the polling relay's partitions, and a busy
// relay's runs ahead of an idle relay's unpublished rows. Here b
// publishes its own later rows and its floor passes a's five older ones;
// b's shared poll still names a's partition.
func TestSharedPollSeesBelowItsFloor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	a, b, _ := twoPollingClaimers(t, db)
	ownedAgg := func(owner string) string {
		var agg string
		if err := db.Pool.QueryRow(ctx, `SELECT 'agg-' || g FROM generate_series(0, 999) g
WHERE outbox_key_partition('agg-' || g) IN (SELECT partition FROM outbox_partitions WHERE owner = $1) LIMIT 1`, owner).Scan(&agg); err != nil {
			t.Fatal(err)
		}
		return agg
	}
	insert := func(agg string, n int) (maxSeq int64) {
		if err := db.Pool.QueryRow(ctx, `WITH i AS (INSERT INTO outbox (id, aggregate_id, event_type, payload)
SELECT gen_random_uuid(), $1, 't', '{}' FROM generate_series(1, $2) RETURNING seq) SELECT max(seq) FROM i`, agg, n).Scan(&maxSeq); err != nil {
			t.Fatal(err)
		}
		return maxSeq
	}
	aTop := insert(ownedAgg(a.Member()), 5)
	insert(ownedAgg(b.Member()), 5)
	// b claims and publishes its rows; its floor moves every
	// advanceEvery, at a claim.
	testenv.Eventually(t, 30*time.Second, func() bool {
		batch, err := b.Claim(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(batch.Rows) > 0 {
			seqs := make([]int64, len(batch.Rows))
			for i, r := range batch.Rows {
				seqs[i] = r.Seq
			}
			if _, err := b.MarkPublished(ctx, batch.Token, seqs); err != nil {
				t.Fatal(err)
			}
		}
		return b.Floor() > aTop
	}, "b's floor did not pass a's rows (up to seq %d)", aTop)
	b.PollShared()
	batch, err := b.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if batch.WokeOwners != 1 {
		t.Fatalf("b's shared poll (floor %d) woke %d partitions' owners, want a's 1 (its rows up to seq %d)", b.Floor(), batch.WokeOwners, aTop)
	}
}
