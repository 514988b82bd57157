package relay

import (
	"time"

	"go.uber.org/zap"

	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/produce"
)

// failureLog keeps the log bounded while publishes fail. Failures of the
// events themselves (produce.DeadLetter, RetryAttempt): however many events
// fail, it writes the first failure of an episode at once, then at most
// one summary line per kind (retried or dead-lettered, by reason) per
// interval, with counts and a sample event. An outage (produce.RetryOutage: a
// condition of the cluster) is one line when it begins, naming the
// condition and the broker, and one when publishes have gone through
// without an outage failure for outageQuiet: a cluster coming back fails a
// few publishes more (partitions whose leaders are not elected yet, stale
// metadata), which belong to the same outage. Per-event detail is at debug
// level. An episode of event failures ends with the first batch that has
// no failure. It belongs to the publisher goroutine.
type failureLog struct {
	log   *zap.Logger
	every time.Duration
	// pending counts failures since the last summary, by kind.
	pending map[failKind]*failCount
	order   []failKind
	last    time.Time // last summary; zero when no episode is under way
	total   int64     // failures in this episode
	retried int64     // of them, events given back to be retried
	// outageSince is when the outage under way began (zero: none),
	// outageEvents counts the events it failed, and outageClean is when
	// publishes started going through again (zero: not since its last
	// failure); outageOf says whose it is ("Kafka", "Schema Registry").
	outageSince, outageClean time.Time
	outageEvents             int64
	outageOf                 string
}

// outageQuiet is how long publishes must go through without an outage
// failure before an outage counts as over.
const outageQuiet = 5 * time.Second

// failureLogEvery is how often failureLog summarizes an ongoing episode.
const failureLogEvery = 10 * time.Second

type failKind struct {
	dead   bool
	reason string // produce.Result.Reason
}

type failCount struct {
	n      int64
	sample claim.Row
	topic  string
	err    error
	tries  int
}

func newFailureLog(log *zap.Logger, every time.Duration) *failureLog {
	return &failureLog{log: log, every: every, pending: map[failKind]*failCount{}}
}

// add records one failed event at now, with what the publisher said of it.
func (f *failureLog) add(now time.Time, row *claim.Row, topic string, res produce.Result, dead bool, attempts int) {
	err := res.Err
	if ce := f.log.Check(zap.DebugLevel, "publish failed"); ce != nil {
		ce.Write(zap.String("event_id", row.ID), zap.String("aggregate_id", row.AggregateID), zap.String("topic", topic),
			zap.Int("attempts", attempts), zap.Bool("dead_lettered", dead), zap.Error(err))
	}
	if !dead && res.Outcome == produce.RetryOutage {
		f.outageClean = time.Time{}
		if f.outageSince.IsZero() {
			f.outageSince, f.outageOf = now, outageOf(res.Reason)
			f.log.Error(f.outageOf+" outage: publishes fail for a condition of the "+outageWhat[f.outageOf]+"; events wait and are retried, no attempt counted",
				zap.String("reason", res.Reason), zap.String("topic", topic),
				zap.String("sample_event_id", row.ID), zap.String("sample_aggregate_id", row.AggregateID), zap.Error(err))
		}
		f.outageEvents++
		return
	}
	if !dead {
		f.retried++
	}
	k := failKind{dead: dead, reason: res.Reason}
	c, ok := f.pending[k]
	if !ok {
		c = &failCount{sample: *row, topic: topic, err: err, tries: attempts}
		f.pending[k] = c
		f.order = append(f.order, k)
	}
	c.n++
	f.total++
}

// flush writes the pending summaries if an interval passed since the last
// one (or none was written in this episode); ok ends the episode.
func (f *failureLog) flush(now time.Time, ok bool) {
	if len(f.pending) > 0 && (f.last.IsZero() || now.Sub(f.last) >= f.every || ok) {
		for _, k := range f.order {
			c := f.pending[k]
			fields := []zap.Field{
				zap.Int64("events", c.n), zap.String("reason", k.reason), zap.String("topic", c.topic),
				zap.String("sample_event_id", c.sample.ID), zap.String("sample_aggregate_id", c.sample.AggregateID),
				zap.Int("sample_attempts", c.tries), zap.Error(c.err),
			}
			if k.dead {
				f.log.Error("events dead-lettered: they stay in the outbox table; fix the cause, then `outbox-relay requeue --event-id` (or `outbox-relay status`)", fields...)
			} else {
				f.log.Warn("publish failed; will retry", fields...)
			}
		}
		clear(f.pending)
		f.order = f.order[:0]
		f.last = now
	}
	if ok && !f.outageSince.IsZero() && f.outageClean.IsZero() {
		f.outageClean = now
	}
	f.tick(now)
	if ok && !f.last.IsZero() {
		// Dead letters alone end no episode worth a line: nothing waits.
		if f.retried > 0 {
			f.log.Info("publishing works again", zap.Int64("failed_events_in_episode", f.total))
		}
		f.last, f.total, f.retried = time.Time{}, 0, 0
	}
}

// outageOf names whose outage a publish failure's reason is: the Schema
// Registry's (produce's "registry" and "no_subject") or the Kafka
// cluster's.
func outageOf(reason string) string {
	if reason == "registry" || reason == "no_subject" {
		return "Schema Registry"
	}
	return "Kafka"
}

// outageWhat is what each outageOf is a condition of, for the log line.
var outageWhat = map[string]string{"Kafka": "cluster", "Schema Registry": "registry (unreachable, refusing the credentials, or without the event's schema)"}

// tick ends an outage whose publishes have gone through for outageQuiet;
// the publisher calls it while idle too.
func (f *failureLog) tick(now time.Time) {
	if f.outageSince.IsZero() || f.outageClean.IsZero() || now.Sub(f.outageClean) < outageQuiet {
		return
	}
	f.log.Info(f.outageOf+" outage over: publishing again", zap.Duration("outage", f.outageClean.Sub(f.outageSince).Round(time.Millisecond)),
		zap.Int64("failed_publishes", f.outageEvents))
	f.outageSince, f.outageClean, f.outageEvents = time.Time{}, time.Time{}, 0
}

// stop writes the pending summaries at shutdown. An episode still open is
// not over: it says so, instead of "publishing works again".
func (f *failureLog) stop(now time.Time) {
	if len(f.pending) > 0 {
		f.last = time.Time{} // write them now
	}
	f.flush(now, false)
	// Dead letters alone are no failure under way: nothing is retried.
	if (!f.last.IsZero() && f.retried > 0) || !f.outageSince.IsZero() {
		f.log.Warn("relay stopping while publishes fail; the events are retried by the next relay to claim them",
			zap.Int64("failed_events_in_episode", f.total+f.outageEvents))
	}
	if !f.last.IsZero() || !f.outageSince.IsZero() {
		f.last, f.total, f.retried = time.Time{}, 0, 0
		f.outageSince, f.outageClean, f.outageEvents = time.Time{}, time.Time{}, 0
	}
}
