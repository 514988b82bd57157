package claim

import "time"

// floor is where claims scan from: the seq below which the Claimer knows
// every row is published (advance), with what moves it. Guarded by
// Claimer.mu: only Claim reads and moves it.
type floor struct {
	at          int64
	markers     []marker
	lastSeq     int64 // the sequence's last value at the last advance
	restarts    int64 // times lastSeq went back (restarted)
	lastAdvance time.Time
	lastRescan  time.Time // when a claim last scanned from seq 0
	// resume is where a claim draining a backlog scans from (resume.go);
	// final the highest seq every transaction that could commit it has
	// ended by (the floor's settled marker; -1: none yet).
	resume   resume
	final    int64
	scanFrom int64 // where the last claim scanned from
	noResume bool  // every claim scans from the floor (tests)
}

// rescanEvery is how often a claim ignores the floor and scans from the
// start, so that nothing the floor passed by mistake waits longer. Such a
// claim walks every dead index entry below the floor (many, while a long
// transaction keeps VACUUM from removing them), so it is rare.
const rescanEvery = time.Minute

// marker says: every row with seq <= seq got its seq from a transaction
// that had ended or was one of holders (the transactions holding a lock on
// the outbox's sequence, by pg_locks.virtualtransaction, read after the
// sequence). Once none of holders holds it any more, every row with seq <=
// seq is final: committed or rolled back.
type marker struct {
	seq     int64
	holders []string
}

// advanceEvery is how often Claim moves the floor. Reading pg_locks is
// not free, and its cost grows with the sessions holding locks (figures in
// docs/internals.md, "How claiming stays fast"): every 100 ms keeps it to
// a few percent of a core per relay, while the floor lags the published
// rows by a few hundred rows at 1,000 events/s, which the claim's scan and
// the guard's lower bound walk past cheaply.
const advanceEvery = 100 * time.Millisecond

// maxMarkers bounds the pending markers (about 100 s of them) while a long
// writing transaction holds them back; meanwhile the floor stays where it
// is.
const maxMarkers = 1024

// restarted drops the floor to 0 and every pending marker, after the
// sequence's last value went below the one read before: ALTER SEQUENCE
// ... RESTART, a setval lower, a logical-replication cutover (sequences
// are not carried over) or a restore. New rows get seqs below the floor,
// which would otherwise hide them from every claim but the once-a-minute
// rescan; and a pending marker says
// nothing about them (a transaction that took a low seq after the marker
// was read is not among its holders), so none may move the floor. The
// claims scan from seq 0 until the next advance settles a marker of the
// new sequence: the floor then rises to that marker or the lowest
// unpublished row, whichever is lower. Until this runs (at most
// advanceEvery after the restart, at the next claim), the claims
// themselves scan from seq 0 when the sequence is below the floor (see
// sql/claim.SQL). outbox-relay's metrics (internal/metrics, SequenceBehindError) report the restart itself
// (readiness, one log line).
func (f *floor) restarted() {
	f.at = 0
	f.final = -1
	f.resume.reset()
	f.markers = nil
	f.restarts++
}

// advance records a new marker (seq and the transactions holding the
// sequence's lock), settles the pending markers none of whose holders is
// among the holders now, and moves the floor up to the highest settled
// marker, but never past an unpublished row.
func (f *floor) advance(seq int64, holders []string, minUnpublished *int64) {
	now := make(map[string]struct{}, len(holders))
	for _, h := range holders {
		now[h] = struct{}{}
	}
	settled := int64(-1)
	i := 0
markers:
	for ; i < len(f.markers); i++ {
		for _, h := range f.markers[i].holders {
			if _, ok := now[h]; ok {
				break markers
			}
		}
		settled = f.markers[i].seq
	}
	f.markers = f.markers[i:]
	if len(f.markers) < maxMarkers && seq > 0 {
		f.markers = append(f.markers, marker{seq: seq, holders: holders})
	}
	if settled < 0 {
		return
	}
	f.final = max(f.final, settled)
	next := settled + 1
	if minUnpublished != nil && *minUnpublished < next {
		next = *minUnpublished
	}
	if next > f.at {
		f.at = next
	}
}
