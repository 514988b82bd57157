package relay

import (
	"time"

	"go.uber.org/zap"

	"github.com/pgoutbox/outbox/kafka"
	"github.com/pgoutbox/outbox/lease"
)

// failureLog keeps the log bounded while publishes fail: however many
// events fail, it writes the first failure of an episode at once, then at
// most one summary line per kind (retried or dead-lettered, by reason) per
// interval, with counts and a sample event; per-event detail is at debug
// level. An episode ends with the first batch that has no failure.
// It belongs to the publisher goroutine.
type failureLog struct {
	log   *zap.Logger
	every time.Duration
	// pending counts failures since the last summary, by kind.
	pending map[failKind]*failCount
	order   []failKind
	last    time.Time // last summary; zero when no episode is under way
	total   int64     // failures in this episode
}

// failureLogEvery is how often failureLog summarizes an ongoing episode.
const failureLogEvery = 10 * time.Second

type failKind struct {
	dead   bool
	reason string // kafka.ErrorReason
}

type failCount struct {
	n      int64
	sample lease.Row
	topic  string
	err    error
	tries  int
}

func newFailureLog(log *zap.Logger, every time.Duration) *failureLog {
	return &failureLog{log: log, every: every, pending: map[failKind]*failCount{}}
}

// add records one failed event.
func (f *failureLog) add(row *lease.Row, topic string, err error, dead bool, attempts int) {
	if ce := f.log.Check(zap.DebugLevel, "publish failed"); ce != nil {
		ce.Write(zap.String("event_id", row.ID), zap.String("aggregate_id", row.AggregateID), zap.String("topic", topic),
			zap.Int("attempts", attempts), zap.Bool("dead_lettered", dead), zap.Error(err))
	}
	k := failKind{dead: dead, reason: kafka.ErrorReason(err)}
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
	if ok && !f.last.IsZero() {
		f.log.Info("publishing works again", zap.Int64("failed_events_in_episode", f.total))
		f.last, f.total = time.Time{}, 0
	}
}

// stop writes the pending summaries at shutdown. An episode still open is
// not over: it says so, instead of "publishing works again".
func (f *failureLog) stop(now time.Time) {
	if len(f.pending) > 0 {
		f.last = time.Time{} // write them now
	}
	f.flush(now, false)
	if !f.last.IsZero() {
		f.log.Warn("relay stopping while publishes fail; the events are retried by the next relay to claim them", zap.Int64("failed_events_in_episode", f.total))
		f.last, f.total = time.Time{}, 0
	}
}
