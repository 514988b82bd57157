package relay

import (
	"context"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox/internal/backoff"
	"github.com/pgoutbox/outbox/internal/claim"
)

// Marking delivered rows published. A mark is a transaction of its own
// unless a claim carries it: while the relay claims often (events keep
// arriving), the claimer takes the marks waiting at that moment into its
// claim's transaction, one transaction instead of two per batch; what
// waits longer than its delay (the relay went idle) the marker marks by
// itself. A mark's timing moves no event: the row was published
// when Kafka acknowledged it; until the mark, the row is only still leased
// by this relay.

// markDelay returns how long a delivered chunk waits for a claim to carry
// its mark before the marker marks it alone: Config.ClaimWindow, during
// which the relay keeps claiming after a claim that found events (every
// gap of at most 20ms, or 4×ClaimWindowPoll), so that the marks of a relay
// that keeps claiming ride along; without a claim window, minMarkDelay.
// The wait moves no event: a claim carries the marks waiting before it
// claims, so an aggregate's next event never waits for its predecessor's
// mark; only the window in which a crash republishes grows.
func markDelay(cfg *Config) time.Duration {
	if cfg.ClaimWindow > 0 {
		return max(cfg.ClaimWindow, minMarkDelay)
	}
	return minMarkDelay
}

// minMarkDelay is the shortest markDelay.
const minMarkDelay = 2 * time.Millisecond

// maxPendingMarks bounds the marks waiting: the publisher waits when this
// many batches are unmarked (the database is slow or failing), as it
// waited on a full channel before.
const maxPendingMarks = 8

// markJob is one delivered chunk to mark published.
type markJob struct {
	token uuid.UUID
	seqs  []int64
	due   time.Time // when the marker takes it if no claim did
	tries int       // failed marks so far
}

// markQueue holds the delivered chunks waiting for their mark: the
// publisher puts them, a claim takes all of them into its transaction (and
// puts them back if it failed), the marker takes those due. Its contents
// are one shared value (shared.go): the publisher waiting for room and the
// marker waiting for a job to come due wait on its changes.
type markQueue struct {
	limit int // maxPendingMarks; tests that drive the publisher alone raise it
	clock clock
	s     *shared[markState]
}

// markState is the contents of a markQueue.
type markState struct {
	jobs   []markJob
	closed bool
}

func newMarkQueue(c clock) *markQueue {
	return &markQueue{limit: maxPendingMarks, clock: c, s: newShared(markState{})}
}

// put adds a delivered chunk, due after delay, waiting while
// maxPendingMarks chunks wait (they are due at once then: the marker takes
// them without waiting for a claim).
func (q *markQueue) put(token uuid.UUID, seqs []int64, delay time.Duration) {
	for {
		full := false
		changed := q.s.update(func(s *markState) bool {
			now := q.clock.Now()
			if full = len(s.jobs) >= q.limit && !s.closed; full {
				for i := range s.jobs {
					s.jobs[i].due = now
				}
				return true
			}
			s.jobs = append(s.jobs, markJob{token: token, seqs: seqs, due: now.Add(delay)})
			return true
		})
		if !full {
			return
		}
		<-changed
	}
}

// putBack returns jobs a claim could not mark (its transaction failed), at
// the front, due at once.
func (q *markQueue) putBack(jobs []markJob) {
	q.s.update(func(s *markState) bool {
		now := q.clock.Now()
		for i := range jobs {
			jobs[i].due = now
		}
		s.jobs = append(jobs, s.jobs...)
		return true
	})
}

// take removes and returns the jobs waiting, all of them (a claim carries
// them) or, with due set, those due by then (the marker).
func (q *markQueue) take(due time.Time) (out []markJob) {
	q.s.update(func(s *markState) bool {
		i := 0
		for i < len(s.jobs) && (due.IsZero() || !s.jobs[i].due.After(due)) {
			i++
		}
		if i == 0 {
			return false
		}
		out = append([]markJob(nil), s.jobs[:i]...)
		s.jobs = s.jobs[i:]
		return true
	})
	return out
}

// markView is what next reads of a markQueue in one locked step: whether
// it is closed, whether a job waits and when the oldest is due, and the
// channel closed at the queue's next change. Reading all of it at once is
// what keeps a waiter from missing a change: any change after the view
// closes its channel.
type markView struct {
	closed  bool
	waiting bool
	due     time.Time // the oldest job's; zero when none waits
	changed <-chan struct{}
}

// next returns a view of the queue.
func (q *markQueue) next() (v markView) {
	v.changed = q.s.update(func(s *markState) bool {
		v.closed = s.closed
		if v.waiting = len(s.jobs) > 0; v.waiting {
			v.due = s.jobs[0].due
		}
		return false
	})
	return v
}

// close wakes the marker for its last round; put no longer waits.
func (q *markQueue) close() {
	q.s.update(func(s *markState) bool { s.closed = true; return true })
}

// toLease turns jobs into the marks a claim carries.
func toLease(jobs []markJob) []*claim.Mark {
	out := make([]*claim.Mark, len(jobs))
	for i, j := range jobs {
		out[i] = &claim.Mark{Token: j.token, Seqs: j.seqs}
	}
	return out
}

// markAlone marks one chunk in its own transaction, retrying with backoff.
func (r *Relay) markAlone(work context.Context, job markJob) {
	for attempt := job.tries + 1; ; attempt++ {
		mctx, cancel := context.WithTimeout(work, r.cfg.DBTimeout)
		began := r.clock.Now()
		n, err := r.claimer.MarkPublished(mctx, job.token, job.seqs)
		cancel()
		r.recordMark(r.clock.Now().Sub(began), len(job.seqs), n, err)
		if err == nil {
			return
		}
		if r.stop.stopping() && (work.Err() != nil || attempt >= 5) {
			r.stop.failedMark(len(job.seqs), err)
			return
		}
		if work.Err() != nil || attempt >= 5 {
			r.log.Error("mark published failed; the events are published again after their lease", zap.Error(err), zap.Int("events", len(job.seqs)))
			return
		}
		d := backoff.Delay(50*time.Millisecond, 2*time.Second, attempt)
		if !r.stop.stopping() {
			r.log.Warn("mark published failed; retrying", zap.Error(err), zap.Duration("retry_in", d))
		}
		sleepCtx(work, r.clock, d)
	}
}
