package relay

import (
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/pgoutbox/outbox/lease"
)

// Recording what the relay does. Each outcome of a step (a wake-up, a
// claim, what the claimer owns, a publish call started and answered, rows
// published, a failure, a mark, a release, a dead letter) is recorded once, by Relay.record, which feeds every sink
// that counts it: the Stats counters, the Observer (and AttemptObserver),
// and the health progress; it also writes the warnings that belong to the
// outcome itself.

// counters are the Stats counters; any goroutine adds to them.
type counters struct {
	claims, emptyClaims, published, marked, failed, heldBack, released, deadLettered atomic.Int64
	wakeNotify, wakePoll, wakeWindow, wakeBacklog                                    atomic.Int64
}

// reportKind says which outcome a report records.
type reportKind int

const (
	reportWoke         reportKind = iota // the claimer woke up: cause
	reportClaim                          // a claim: took, rows, takenOver, err, stopping
	reportOwnership                      // what the claimer owns after a claim: ownership (claimer goroutine only)
	reportPublishing                     // a publish call started: began
	reportPublishCall                    // a publish call answered: began, errs, err
	reportPublished                      // Kafka acknowledged rows, carried by the call from began to ended
	reportFailed                         // a failed row: failure, topic, dead, attempts
	reportHeldBack                       // n rows given back held behind an earlier event
	reportMark                           // a mark statement: took, n rows tried, marked, err
	reportReleased                       // n rows given back
	reportDeadLettered                   // n rows parked as dead letters
)

// report is one outcome to record; which fields count depends on kind
// (see reportKind).
type report struct {
	kind         reportKind
	cause        wakeCause
	took         time.Duration
	rows         []lease.Row
	n, takenOver int
	marked       int64
	err          error
	errs         []error
	// stopping: the claim failed because the relay is stopping (no stall).
	stopping     bool
	began, ended time.Time
	failure      *failure
	ownership    lease.Ownership
	topic        string
	dead         bool
	attempts     int
}

// record records one outcome in the Stats counters, the Observer and the
// health progress.
func (r *Relay) record(e report) {
	s := &r.stats
	switch e.kind {
	case reportWoke:
		switch e.cause {
		case causeBacklog:
			s.wakeBacklog.Add(1)
		case causeNotify:
			s.wakeNotify.Add(1)
		case causePoll:
			s.wakePoll.Add(1)
		case causeWindow:
			s.wakeWindow.Add(1)
		}
	case reportClaim:
		r.recordClaim(e)
	case reportOwnership:
		r.recordOwnership(e.ownership)
	case reportPublishing:
		r.progress.inFlight.Store(e.began.UnixNano())
	case reportPublishCall:
		r.progress.inFlight.Store(0)
		r.progress.publishAnswered(e.began, e.errs)
		if e.err != nil {
			r.progress.publishFailed(e.err)
		}
	case reportPublished:
		if r.att != nil {
			r.attemptedAll(e.rows, e.began, e.ended)
		}
		if len(e.rows) > 0 {
			s.published.Add(int64(len(e.rows)))
			r.progress.resolved()
			r.obs.Published(e.rows)
		}
	case reportFailed:
		r.recordFailure(e)
	case reportHeldBack:
		s.heldBack.Add(int64(e.n))
	case reportMark:
		r.recordMark(e)
	case reportReleased:
		s.released.Add(int64(e.n))
	case reportDeadLettered:
		s.deadLettered.Add(int64(e.n))
		r.progress.resolved()
	}
}

func (r *Relay) recordClaim(e report) {
	r.stats.claims.Add(1)
	if e.err != nil {
		r.obs.Claimed(e.took, 0, 0, e.err)
		if !e.stopping {
			r.progress.claims.fail(r.clock.Now(), e.err)
		}
		return
	}
	r.progress.claims.ok()
	r.obs.Claimed(e.took, e.n, e.takenOver, nil)
	if e.n == 0 {
		r.stats.emptyClaims.Add(1)
		return
	}
	r.progress.claimedRows(r.clock.Now())
}

func (r *Relay) recordFailure(e report) {
	f := e.failure
	r.stats.failed.Add(1)
	if r.att != nil {
		outcome := OutcomeRetried
		if e.dead {
			outcome = OutcomeDeadLettered
		}
		r.att.Attempted(Attempt{Row: &f.row, Topic: e.topic, Partition: r.partition(e.topic, &f.row),
			Began: f.began, Ended: f.ended, Outcome: outcome, Err: f.err, Attempts: e.attempts})
	}
	r.obs.PublishFailed(f.row, e.topic, f.err, e.dead)
	r.fails.add(r.clock.Now(), &f.row, e.topic, f.err, e.dead, e.attempts)
}

// recordMark records one mark's outcome, and warns about rows whose lease
// passed to another claim.
func (r *Relay) recordMark(e report) {
	r.obs.Marked(e.took, e.n, e.marked, e.err)
	if e.err != nil {
		r.progress.marks.fail(r.clock.Now(), e.err)
		return
	}
	r.progress.marks.ok()
	r.stats.marked.Add(e.marked)
	if e.marked < int64(e.n) {
		r.log.Warn("lease lost before mark: another claim holds these events and publishes them again",
			zap.Int("events", e.n), zap.Int64("marked", e.marked))
	}
}

// attemptedAll tells r.att that rows, carried by the publish call from
// began to ended, were published.
func (r *Relay) attemptedAll(rows []lease.Row, began, ended time.Time) {
	for i := range rows {
		row := &rows[i]
		topic := r.topicOf(row)
		r.att.Attempted(Attempt{Row: row, Topic: topic, Partition: r.partition(topic, row),
			Began: began, Ended: ended, Outcome: OutcomePublished, Attempts: row.Attempts})
	}
}

// partition returns the partition of row's record on topic, or -1 when the
// publisher does not say (Attempt.Partition).
func (r *Relay) partition(topic string, row *lease.Row) int {
	if r.partitionOf == nil {
		return -1
	}
	return r.partitionOf(topic, []byte(row.AggregateID))
}

// Stats returns a snapshot of the relay's counters.
func (r *Relay) Stats() Stats {
	s := &r.stats
	o := r.claimer.Ownership()
	return Stats{
		Claims: s.claims.Load(), EmptyClaims: s.emptyClaims.Load(),
		Published: s.published.Load(), Marked: s.marked.Load(), Failed: s.failed.Load(),
		HeldBack: s.heldBack.Load(), Released: s.released.Load(), DeadLettered: s.deadLettered.Load(),
		WakeNotify: s.wakeNotify.Load(), WakePoll: s.wakePoll.Load(),
		WakeWindow: s.wakeWindow.Load(), WakeBacklog: s.wakeBacklog.Load(),
		OwnedPartitions: int64(o.Owned), Partitions: int64(o.Partitions), Relays: int64(o.Members),
		PartitionsAcquired: o.Acquired, PartitionsReleased: o.Released, Handovers: o.TakenOver,
		Member: o.Member,
	}
}

// recordOwnership records what the claimer owns after a claim: one log
// line when the number of key partitions it owns or of live relays
// changes, the share the claim schedule's busy mode uses, and the
// ownership step of Health (a relay that owns none while others own them,
// or that a relay of an older version keeps from claiming). Claimer
// goroutine only (lastOwned, lastMembers, ownedShare).
func (r *Relay) recordOwnership(o lease.Ownership) {
	if o.Owned != r.lastOwned || o.Members != r.lastMembers {
		r.log.Info("key partitions", zap.Int("owned", o.Owned), zap.Int("partitions", o.Partitions), zap.Int("releasing", o.Releasing),
			zap.Int("relays", o.Members), zap.Int64("acquired_total", o.Acquired), zap.Int64("released_total", o.Released),
			zap.Int64("handovers_total", o.TakenOver), zap.String("member", o.Member))
		r.lastOwned, r.lastMembers = o.Owned, o.Members
	}
	r.ownedShare = 0
	if o.Partitions > 0 && o.Owned > 0 {
		r.ownedShare = float64(o.Owned) / float64(o.Partitions)
	}
	r.progress.ownership(r.clock.Now(), o)
}
