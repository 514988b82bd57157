package claim

import "time"

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
// that started before it committed), an extension that renewed fewer rows
// than asked (the relay drops the others: rewind too), a rebalance other
// than a timely renewal (partitions acquired bring rows of their own, and
// a relay paused past its membership may have dropped rows it claimed), a
// rescan, a lost claim, a restarted sequence.
// A claim that is not full means the scan reached the end of what is
// claimable: the next one starts from the floor again, and picks up what
// was skipped.
//
// Held rows: a large backlog behind a held dead letter (an aggregate
// whose writers go on writing) made every claim from the floor walk it,
// however few rows it took (1.20 s a claim beside 100,000 held rows,
// BenchmarkClaimBesideHeldRows). While rows are held (the order guard's 'holds') but none backs
// off ('backoff'), the rows below a claim that a scan passed over stay
// where they are until somebody requeues (the order guard's 'requeued',
// which every relay's claims read), so any claim, full or not, resumes
// after what it saw: a full one after its last row, one that reached the
// end at the last seq known final. Such a resume point is guarded: the
// claims from it run the order guard even if 'holds' ended meanwhile, and
// the guard counts an earlier live row of the candidate's aggregate below
// the resume point that this relay does not lease as blocking
// (rowstate.States.Waiting's skipped), so a row that turned claimable
// below it by a way this reasoning missed (a requeue by hand in SQL, an
// older version's requeue) delays its aggregate's later events until the
// next scan from the floor, and never lets them pass it.
//
// Each resumed run is also bounded (maxResumed claims, and at least
// floorCostFactor times the last scan from the floor), so that whatever
// this reasoning missed waits a bounded time, not a whole backlog, while
// the scans from the floor over held rows cost at most about 1/floorCostFactor
// of the claims' time.
type resume struct {
	// next is the seq the next claim scans from; 0: from the floor.
	next int64
	// claims counts the claims since the last one from the floor, which
	// began at began.
	claims int
	began  time.Time
	// guarded: next was set while rows were held (the claims from it need
	// the order guard); requeued is the 'requeued' entry the run began
	// with (Holds).
	guarded  bool
	requeued int64
	// floorCost is how long the last claim from the floor took.
	floorCost time.Duration
}

// maxResumed bounds a run of resumed claims: every maxResumed-th claim of a
// backlog scans from the floor again (about a second of a 30,000 events/s
// drain at the default batch size).
const maxResumed = 64

// floorCostFactor: a run of resumed claims lasts at least this many times
// the last claim from the floor took, so that scans from the floor over
// many held rows take at most about a twentieth of the claims' time.
const floorCostFactor = 20

// from returns where a claim scans from, given the floor.
func (r *resume) from(floor int64) int64 {
	if r.next > floor {
		return r.next
	}
	return floor
}

// reset makes the next claim scan from the floor.
func (r *resume) reset() { *r = resume{floorCost: r.floorCost} }

// scanState is what a claim saw that decides where the next one scans from
// (see resume): full: it stopped at its bound (rows or bytes); quiet:
// nothing of this relay's own may turn claimable below it by itself (no
// lease of an earlier holder, no rows it could not give back); holds,
// backoff, requeued: the order guard's entries read before the claim
// (Holds; requeued in microseconds since 1970, 0: never); final: the
// highest seq known final (-1: none); fromFloor: the claim scanned from
// the floor, taking took.
type scanState struct {
	full, quiet, holds, backoff bool
	requeued                    int64
	final                       int64
	fromFloor                   bool
	took                        time.Duration
}

// claimed records a claim's outcome at now. last is the highest seq it
// claimed (unused when it claimed none).
func (r *resume) claimed(last int64, s scanState, now time.Time) {
	if s.fromFloor {
		r.floorCost = s.took
	}
	ended := r.claims >= maxResumed && now.Sub(r.began) >= floorCostFactor*r.floorCost
	if !s.quiet || s.final < 0 || s.backoff || ended || (r.next != 0 && r.requeued != s.requeued) ||
		(!s.holds && (!s.full || r.guarded)) {
		r.reset()
		return
	}
	if r.next == 0 {
		r.claims, r.began, r.requeued = 0, now, s.requeued
	}
	r.claims++
	r.guarded = s.holds
	if s.full {
		r.next = min(last, s.final) + 1
	} else {
		r.next = max(r.next, s.final+1)
	}
}
