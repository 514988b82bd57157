package claim

// resume is where the next claim's scan starts while the relay drains a
// backlog: just after the last row of the previous claim, instead of the
// floor. A scan from the floor walks, before it finds a claimable row,
// every row this relay still has in flight (up to three batches), every
// row published since the floor last moved, and, with several relays, the
// rows of the other relays' partitions in between; a scan from the resume
// point walks only what lies after the rows it already took.
//
// Skipping the rows below the resume point is safe only while none of them
// can become claimable behind the relay's back: a claimable row below it
// would be passed over while a later row of its aggregate above it is
// claimed, and per-aggregate order would break. So a claim resumes only
// after a full claim (a backlog: the scan stopped at the batch's bound,
// not at the end of the claimable rows) that saw the table quiet, and at
// most up to the last seq known to be final:
//
//   - quiet: no row anywhere is backing off or held as a dead letter
//     (the order guard's 'holds'), and no earlier holder of this relay's
//     (a claim whose answer was lost) or rows it could not give back may
//     still hold leases. Such rows turn claimable when their delay or
//     lease ends, without this relay doing anything.
//   - final: every transaction that took a seq at or below it has ended
//     (the floor's settled marker), so no row below the resume point can
//     still be committed late.
//
// Everything else that makes a row below it claimable is this relay's own
// doing and drops the resume point: a release or a dead-lettering (rewind,
// set before the statement is sent; the hold-back state covers the claims
// that started before it committed), a rebalance (partitions acquired
// bring rows of their own), a rescan, a lost claim, a restarted sequence.
// A claim that is not full means the scan reached the end of what is
// claimable: the next one starts from the floor again, and picks up what
// was skipped. Each resumed run is also bounded in claims (maxResumed), so
// that whatever this reasoning missed waits a bounded time, not a whole
// backlog.
type resume struct {
	// next is the seq the next claim scans from; 0: from the floor.
	next int64
	// claims counts the claims since the last one from the floor.
	claims int
}

// maxResumed bounds a run of resumed claims: every maxResumed-th claim of a
// backlog scans from the floor again (about a second of a 30,000 events/s
// drain at the default batch size).
const maxResumed = 64

// from returns where a claim scans from, given the floor.
func (r *resume) from(floor int64) int64 {
	if r.next > floor {
		return r.next
	}
	return floor
}

// reset makes the next claim scan from the floor.
func (r *resume) reset() { *r = resume{} }

// claimed records a claim's outcome. last is the highest seq it claimed
// (unused when it claimed none); full says it stopped at its bound (rows
// or bytes); quiet that nothing below it can turn claimable by itself
// (see resume); final is the highest seq known final (-1: none).
func (r *resume) claimed(last int64, full, quiet bool, final int64) {
	if !full || !quiet || final < 0 || r.claims >= maxResumed {
		r.reset()
		return
	}
	r.claims++
	r.next = min(last, final) + 1
}
