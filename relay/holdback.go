package relay

import (
	"time"

	"github.com/pgoutbox/outbox/internal/claim"
)

// The hold-back state: may this claimed row be published now, or must it wait
// behind an earlier event of its aggregate?
//
// Invariant (per-aggregate order): an event is published only after every
// earlier (lower seq) event of its aggregate was published, or dead-lettered.
//
// A claim keeps it by itself against other relays and against events
// backing off or held as dead letters: it never takes a row while an earlier
// unpublished row of its aggregate is leased by another relay or is waiting
// (claim.Claimer's guard). But this relay's own leases do not block its
// claims, because the claimer runs ahead of the publisher: batch N+1 is
// claimed while batch N, which may hold earlier events of the same
// aggregates, is being published. Batches are published in claim order, so
// that is safe as long as batch N publishes those earlier events. When it
// does not — an event failed, was held back, was dead-lettered or was left
// unsent — the batches claimed while it was still leased by this relay may
// hold later events of its aggregate without it. Hence the rule:
//
//	the publisher holds a row back if an earlier row of its aggregate was
//	leased by this relay, unresolved, when that row's claim started, and has
//	not been published since.
//
// holdback tracks the rows that make that true:
//
//   - in the batch being published, rows that failed (fail): the rest of
//     their aggregate in this batch waits;
//   - rows given back (a release or a dead-lettering committed: gaveBack),
//     by the number of the last claim started before the statement
//     committed: batches of claims up to that number may hold their
//     aggregates' later events; claims after it find the given-back row
//     claimable (or blocking, if it backs off or is held) and take rows in
//     seq order;
//   - rows that could not be given back (the statement failed: stuck): they
//     stay leased by this relay, invisible to its claims, until their lease
//     ends, so batches claimed before then may hold later events.
//
// A held row is itself given back (and so holds its own later events back in
// the batches claimed meanwhile). That chain must end, or the relay claims
// and releases the same rows forever while the claimer runs ahead on a
// backlog: after a batch gave rows back, the claimer therefore starts no new
// claim until every batch it already claimed is settled (claimGate). The
// claims after that see every given-back row, and the holds by claim number
// expire with the batches claimed before.
//
// A holdback belongs to the publisher goroutine; it is not safe for
// concurrent use.
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
