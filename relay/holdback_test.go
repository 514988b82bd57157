package relay

import (
	"fmt"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/claim"
)

// Unit tests of the hold-back state: synthetic batches, no database. The
// sequences are the ones the integration tests found (see the comment of
// each case); model_test.go drives random interleavings.

func row(agg string, seq int64) claim.Row {
	return claim.Row{AggregateID: agg, Seq: seq, ID: fmt.Sprint(seq)}
}

// step is one operation on a holdback in a case.
type step struct {
	begin    uint64 // > 0: begin the batch of this claim number...
	at       time.Duration
	fail     *claim.Row // fail this row in the current batch
	gaveBack []claim.Row
	last     uint64 // ...with this last claim started
	stuck    *claim.Row
	leaseEnd time.Duration
	// held: rows that must be held in the current batch; free: rows that
	// must not.
	held, free []claim.Row
}

func TestHoldback(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	p := func(r claim.Row) *claim.Row { return &r }
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"a failed row holds its aggregate's later rows in the same batch, not other aggregates", []step{
			{begin: 1, free: []claim.Row{row("A", 1), row("B", 2)}},
			{fail: p(row("A", 1)), held: []claim.Row{row("A", 3)}, free: []claim.Row{row("B", 4)}},
			{begin: 2, free: []claim.Row{row("A", 5)}}, // nothing given back yet: the failure alone holds nothing across batches
		}},
		{"rows given back hold later rows in batches claimed before the release committed, and no later batch", []step{
			{begin: 1},
			{gaveBack: []claim.Row{row("A", 10)}, last: 3},
			{begin: 2, held: []claim.Row{row("A", 11)}, free: []claim.Row{row("A", 10), row("A", 9), row("B", 12)}},
			{begin: 3, held: []claim.Row{row("A", 20)}},
			{begin: 4, free: []claim.Row{row("A", 10), row("A", 11), row("A", 20)}},
		}},
		{"several give-backs of one aggregate before the gate drains hold from the lowest seq", []step{
			{begin: 1},
			{gaveBack: []claim.Row{row("A", 10)}, last: 2},
			{begin: 2, held: []claim.Row{row("A", 11)}},
			{gaveBack: []claim.Row{row("A", 11), row("A", 8)}, last: 2},
			{begin: 2, held: []claim.Row{row("A", 9)}},
			{begin: 3, free: []claim.Row{row("A", 9), row("A", 12)}},
		}},
		// relay.TestOrderKeptWhenSkippedEventIsReleasedAfterALaterClaim: A1
		// fails in batch 1 while batch 2 (claimed) holds A2; A2 is held and
		// given back; a claim started before that release committed (3)
		// may hold A1 (claimable again) and A3 without A2.
		{"a held row's own give-back holds its later rows in claims started before it committed", []step{
			{begin: 1, fail: p(row("A", 1))},
			{gaveBack: []claim.Row{row("A", 1)}, last: 2},
			{begin: 2, held: []claim.Row{row("A", 2)}},
			{gaveBack: []claim.Row{row("A", 2)}, last: 3},
			{begin: 3, free: []claim.Row{row("A", 1)}, held: []claim.Row{row("A", 3)}},
			{begin: 4, free: []claim.Row{row("A", 2), row("A", 3)}},
		}},
		// relay.TestOrderKeptWhenTheFailedEventCannotBeReleased: the failed
		// row's release failed, so it stays leased by this relay, invisible
		// to its claims, until the lease ends.
		{"a row that could not be given back holds its aggregate until its lease ends, plus the margin", []step{
			{begin: 1, at: 0, fail: p(row("A", 1))},
			{stuck: p(row("A", 1)), leaseEnd: time.Second},
			{begin: 2, at: 500 * time.Millisecond, held: []claim.Row{row("A", 2)}, free: []claim.Row{row("B", 3)}},
			{begin: 3, at: time.Second + 900*time.Millisecond, held: []claim.Row{row("A", 4)}},
			{begin: 4, at: time.Second + stuckMargin, free: []claim.Row{row("A", 1), row("A", 5)}},
		}},
		// A dead letter (hold or skip) is given back like a release: the
		// claims after it see it (blocking, with hold); the batches claimed
		// before hold its later events.
		{"a dead-lettered row holds its later rows in the batches already claimed", []step{
			{begin: 1, fail: p(row("A", 1))},
			{gaveBack: []claim.Row{row("A", 1)}, last: 2},
			{begin: 2, held: []claim.Row{row("A", 2)}},
			{begin: 3, free: []claim.Row{row("A", 2)}},
		}},
		// A backoff is the claim guard's business once the release
		// committed: the hold here ends with the claims, not with the
		// backoff.
		{"holds by claim number end with the claim number, whatever the backoff", []step{
			{begin: 1, at: 0},
			{gaveBack: []claim.Row{row("A", 1)}, last: 1},
			{begin: 2, at: time.Hour, free: []claim.Row{row("A", 2)}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHoldback()
			for i, s := range tc.steps {
				if s.begin > 0 {
					h.begin(s.begin, t0.Add(s.at))
				}
				if s.fail != nil {
					h.fail(s.fail)
				}
				if s.gaveBack != nil {
					h.gaveBack(s.gaveBack, s.last)
				}
				if s.stuck != nil {
					h.stuck(s.stuck, t0.Add(s.leaseEnd))
				}
				for _, r := range s.held {
					if held, _ := h.heldBack(&r); !held {
						t.Errorf("step %d: %s/%d not held back", i, r.AggregateID, r.Seq)
					}
				}
				for _, r := range s.free {
					if held, why := h.heldBack(&r); held {
						t.Errorf("step %d: %s/%d held back: %s", i, r.AggregateID, r.Seq, why)
					}
				}
			}
		})
	}
}

func TestClaimGateDrainsOnceAfterAGiveBack(t *testing.T) {
	g := newClaimGate()
	if !g.pass() {
		t.Fatal("a fresh gate does not pass")
	}
	g.next()
	g.batchSent()
	g.next()
	g.batchSent()
	if !g.pass() {
		t.Fatal("gate closed without a flush")
	}
	g.settled() // batch 1, which gave rows back:
	g.flush()
	if g.pass() {
		t.Fatal("gate open while batch 2, claimed before the give-back, is not settled")
	}
	g.settled()
	if !g.pass() {
		t.Fatal("gate closed after every batch sent was settled")
	}
	g.next()
	g.batchSent()
	if !g.pass() {
		t.Fatal("the flush was not over once the pipeline drained")
	}
}
