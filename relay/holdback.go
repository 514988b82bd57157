package relay

import (
	"time"

	"github.com/pgoutbox/outbox/internal/claim"
)

// holdback says whether a claimed row may be published now or must wait
// behind an earlier event of its aggregate. The claim keeps per-aggregate
// order against other relays, backoffs and dead letters; this relay's own
// leases do not block its claims (the claimer runs ahead of the
// publisher), so the publisher keeps the rest of the order itself:
//
//	it holds a row back if an earlier row of its aggregate was leased by
//	this relay, unresolved, when that row's claim started, and has not
//	been published since.
//
// It tracks rows that failed in the batch being published (fail), rows
// given back by the number of the last claim started before the statement
// committed (gaveBack), and rows that could not be given back, until their
// lease ends (stuck). A held row is given back in turn; the claim gate
// (gate.go) ends that chain. docs/internals.md ("Per-aggregate order")
// says why each part is needed. It belongs to the publisher goroutine and
// is not safe for concurrent use.
type holdback struct {
	// byClaim holds back, per aggregate, rows after seq in batches of claims
	// numbered up to no (rows given back).
	byClaim map[string]claimHold
	// byTime holds back, per aggregate, rows after seq in batches claimed
	// before until (rows stuck in this relay's lease).
	byTime map[string]timeHold
	// failed are the aggregates with a failed row in the current batch.
	failed map[string]bool
	// no and claimed identify the current batch.
	no      uint64
	claimed time.Time
}

// claimHold: rows of the aggregate after seq wait in batches of claims up to
// no.
type claimHold struct {
	seq int64
	no  uint64
}

// timeHold: rows of the aggregate after seq wait in batches claimed before
// until.
type timeHold struct {
	seq   int64
	until time.Time
}

// stuckMargin is added to a stuck row's lease end: the lease is counted on
// the database clock from the claim's now(), the local deadline from after
// the claim returned, and clocks may run at slightly different rates.
const stuckMargin = time.Second

func newHoldback() *holdback {
	return &holdback{byClaim: map[string]claimHold{}, byTime: map[string]timeHold{}, failed: map[string]bool{}}
}

// begin starts the batch of claim number no, claimed (committed) at claimed
// by this host's clock. Batches must begin in claim order. It drops the holds
// that no longer apply to this batch or any later one.
func (h *holdback) begin(no uint64, claimed time.Time) {
	h.no, h.claimed = no, claimed
	clear(h.failed)
	for agg, c := range h.byClaim {
		if c.no < no {
			delete(h.byClaim, agg)
		}
	}
	for agg, t := range h.byTime {
		if !claimed.Before(t.until) {
			delete(h.byTime, agg)
		}
	}
}

// Reasons a row is held back, as heldBack returns them.
const (
	heldFailed   = "an earlier event of its aggregate failed in this batch"
	heldGiveBack = "an earlier event of its aggregate was given back after this batch was claimed"
	heldStuck    = "an earlier event of its aggregate is still leased by this relay (its release failed)"
)

// heldBack reports whether row, of the current batch, must wait, and why.
func (h *holdback) heldBack(row *claim.Row) (bool, string) {
	agg := row.AggregateID
	if h.failed[agg] {
		return true, heldFailed
	}
	if c, ok := h.byClaim[agg]; ok && h.no <= c.no && row.Seq > c.seq {
		return true, heldGiveBack
	}
	if t, ok := h.byTime[agg]; ok && h.claimed.Before(t.until) && row.Seq > t.seq {
		return true, heldStuck
	}
	return false, ""
}

// fail records that row failed in the current batch: its aggregate's later
// rows in this batch wait (the failed row is given back or stuck after the
// batch, which then holds them in later batches).
func (h *holdback) fail(row *claim.Row) { h.failed[row.AggregateID] = true }

// gaveBack records that rows were given back (released or dead-lettered, the
// statement committed) when lastStarted was the number of the last claim
// started: batches of claims up to lastStarted hold back their aggregates'
// later rows. Merging keeps the lowest seq per aggregate: all holds by claim
// number pending at once end with the same batch (see claimGate), so the
// merge is their exact union.
func (h *holdback) gaveBack(rows []claim.Row, lastStarted uint64) {
	for i := range rows {
		agg, seq := rows[i].AggregateID, rows[i].Seq
		c, ok := h.byClaim[agg]
		if !ok || seq < c.seq {
			c.seq = seq
		}
		c.no = max(c.no, lastStarted)
		h.byClaim[agg] = c
	}
}

// stuck records that row could not be given back: it stays leased by this
// relay until leaseEnd (local clock), and batches claimed before then (plus
// stuckMargin) hold back its aggregate's later rows. Several stuck rows of one
// aggregate merge into the lowest seq and the latest end, which may hold a
// little more than needed, for at most a lease.
func (h *holdback) stuck(row *claim.Row, leaseEnd time.Time) {
	until := leaseEnd.Add(stuckMargin)
	t, ok := h.byTime[row.AggregateID]
	if !ok || row.Seq < t.seq {
		t.seq = row.Seq
	}
	if until.After(t.until) {
		t.until = until
	}
	h.byTime[row.AggregateID] = t
}

// holding returns how many aggregates have a hold (for tests and logs).
func (h *holdback) holding() int { return len(h.byClaim) + len(h.byTime) }
