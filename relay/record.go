package relay

import (
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/produce"
)

// Recording what the relay does. Each outcome of a step (a wake-up, a
// claim, what the claimer owns, a publish call started and answered, rows
// published, a failure, a mark, a release, a dead letter) is recorded
// once, by its Relay.record* method, which feeds every sink that counts
// it: the Stats counters, the Observer (and AttemptObserver), and the
// health progress; it also writes the warnings that belong to the outcome
// itself.

// counters are the Stats counters; any goroutine adds to them.
type counters struct {
	claims, emptyClaims, published, marked, failed, heldBack, released, deadLettered atomic.Int64
	wakeNotify, wakePoll, wakeWindow, wakeBacklog                                    atomic.Int64
}

// recordWoke counts a wake-up of the claimer by its cause.
func (r *Relay) recordWoke(cause wakeCause) {
	s := &r.stats
	switch cause {
	case causeBacklog:
		s.wakeBacklog.Add(1)
	case causeNotify:
		s.wakeNotify.Add(1)
	case causePoll:
		s.wakePoll.Add(1)
	case causeWindow:
		s.wakeWindow.Add(1)
	}
}

// recordClaim records a claim that took took and leased rows, takenOver
// of them from another holder, or failed with err; stopping: it failed
// because the relay is stopping, which is no stall.
func (r *Relay) recordClaim(took time.Duration, rows, takenOver int, err error, stopping bool) {
	r.stats.claims.Add(1)
	if err != nil {
		r.obs.Claimed(took, 0, 0, err)
		if !stopping {
			r.progress.claims.fail(r.clock.Now(), err)
		}
		return
	}
	r.progress.claims.ok()
	r.obs.Claimed(took, rows, takenOver, nil)
	if rows == 0 {
		r.stats.emptyClaims.Add(1)
		return
	}
	r.progress.claimedRows(r.clock.Now())
}

// recordPublishing records that a publish call started at began.
func (r *Relay) recordPublishing(began time.Time) { r.progress.inFlight.Store(began.UnixNano()) }

// recordPublishCall records the answer to the publish call started at
// began: one result per message.
func (r *Relay) recordPublishCall(began time.Time, results []produce.Result) {
	r.progress.inFlight.Store(0)
	r.progress.publishAnswered(began, results)
}

// recordPublished records rows Kafka acknowledged, carried by the publish
// call from began to ended.
func (r *Relay) recordPublished(rows []claim.Row, began, ended time.Time) {
	if r.att != nil {
		r.attemptedAll(rows, began, ended)
	}
	if len(rows) > 0 {
		r.stats.published.Add(int64(len(rows)))
		r.progress.resolved()
		r.obs.Published(rows)
	}
}

// recordFailure records a row whose publish to topic failed: retried, or
// dead (dead-lettered), after attempts attempts.
func (r *Relay) recordFailure(f *failure, topic string, dead bool, attempts int) {
	r.stats.failed.Add(1)
	if r.att != nil {
		outcome := OutcomeRetried
		if dead {
			outcome = OutcomeDeadLettered
		}
		r.att.Attempted(Attempt{Row: &f.row, Topic: topic, Partition: r.partition(topic, &f.row),
			Began: f.began, Ended: f.ended, Outcome: outcome, Err: f.res.Err, Reason: f.res.Reason, Attempts: attempts})
	}
	r.obs.PublishFailed(f.row, topic, f.res.Err, dead)
	r.fails.add(r.clock.Now(), &f.row, topic, f.res, dead, attempts)
}

// recordMark records one mark statement that took took for n rows, of
// which it marked marked, or failed with err; it warns about rows whose
// lease passed to another claim.
func (r *Relay) recordMark(took time.Duration, n int, marked int64, err error) {
	r.obs.Marked(took, n, marked, err)
	if err != nil {
		r.progress.marks.fail(r.clock.Now(), err)
		return
	}
	r.progress.marks.ok()
	r.stats.marked.Add(marked)
	if marked < int64(n) {
		r.log.Warn("lease lost before mark: another claim holds these events and publishes them again",
			zap.Int("events", n), zap.Int64("marked", marked))
	}
}

// recordHeldBack counts n rows given back held behind an earlier event.
func (r *Relay) recordHeldBack(n int) { r.stats.heldBack.Add(int64(n)) }

// recordReleased counts n rows given back.
func (r *Relay) recordReleased(n int) { r.stats.released.Add(int64(n)) }

// recordDeadLettered counts n rows parked as dead letters, which resolves
// them.
func (r *Relay) recordDeadLettered(n int) {
	r.stats.deadLettered.Add(int64(n))
	r.progress.resolved()
}

// attemptedAll tells r.att that rows, carried by the publish call from
// began to ended, were published.
func (r *Relay) attemptedAll(rows []claim.Row, began, ended time.Time) {
	for i := range rows {
		row := &rows[i]
		topic := r.topicOf(row)
		r.att.Attempted(Attempt{Row: row, Topic: topic, Partition: r.partition(topic, row),
			Began: began, Ended: ended, Outcome: OutcomePublished, Attempts: row.Attempts})
	}
}

// partition returns the partition of row's record on topic, or -1 when the
// publisher does not say (Attempt.Partition).
func (r *Relay) partition(topic string, row *claim.Row) int {
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
func (r *Relay) recordOwnership(o claim.Ownership) {
	if o.Owned != r.lastOwned || o.Members != r.lastMembers {
		r.log.Info("key partitions", zap.Int("owned", o.Owned), zap.Int("partitions", o.Partitions), zap.Int("releasing", o.Releasing),
			zap.Int("relays", o.Members), zap.Int64("acquired_total", o.Acquired), zap.Int64("released_total", o.Released),
			zap.Int64("handovers_total", o.TakenOver), zap.String("member", o.Member))
		r.lastOwned, r.lastMembers = o.Owned, o.Members
	}
	if o.Replaced && !r.replacedLogged {
		r.log.Error("a later process with this relay ID took its membership over: this one claims nothing more; stop it (two processes must not share a --relay-id)",
			zap.String("member", o.Member))
		r.replacedLogged = true
	}
	if (o.TakeoverEnded > 0 || !o.TakeoverBlocked.IsZero()) && !r.takeoverLogged {
		r.log.Info("took the relay ID's membership over from an earlier process", zap.String("member", o.Member),
			zap.Int64("leases_ended", o.TakeoverEnded), zap.Time("earlier_leases_kept_until", o.TakeoverBlocked))
		r.takeoverLogged = true
	}
	r.releasing.Store(int32(o.Releasing))
	r.pollTurn, r.pollOf = o.Turn, o.Members
	r.ownedShare = 0
	if o.Partitions > 0 && o.Owned > 0 {
		r.ownedShare = float64(o.Owned) / float64(o.Partitions)
	}
	r.progress.ownership(r.clock.Now(), o)
}
