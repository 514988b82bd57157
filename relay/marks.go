package relay

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox/lease"
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

// markQueue holds the delivered chunks waiting for their mark.
type markQueue struct {
	limit  int // maxPendingMarks; tests that drive the publisher alone raise it
	mu     sync.Mutex
	cond   *sync.Cond // signalled when jobs are taken (the publisher waits for room)
	jobs   []markJob
	closed bool
	wake   chan struct{} // a job was added or the queue closed (one slot)
}

func newMarkQueue() *markQueue {
	q := &markQueue{limit: maxPendingMarks, wake: make(chan struct{}, 1)}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *markQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// put adds a delivered chunk, due after delay, waiting while
// maxPendingMarks chunks wait (they are due at once then: the marker takes
// them without waiting for a claim).
func (q *markQueue) put(token uuid.UUID, seqs []int64, delay time.Duration) {
	q.mu.Lock()
	for len(q.jobs) >= q.limit && !q.closed {
		now := time.Now()
		for i := range q.jobs {
			q.jobs[i].due = now
		}
		q.signal()
		q.cond.Wait()
	}
	q.jobs = append(q.jobs, markJob{token: token, seqs: seqs, due: time.Now().Add(delay)})
	q.mu.Unlock()
	q.signal()
}

// putBack returns jobs a claim could not mark (its transaction failed), at
// the front, due at once.
func (q *markQueue) putBack(jobs []markJob) {
	q.mu.Lock()
	now := time.Now()
	for i := range jobs {
		jobs[i].due = now
	}
	q.jobs = append(jobs, q.jobs...)
	q.mu.Unlock()
	q.signal()
}

// take removes and returns the jobs waiting, all of them (a claim carries
// them) or, with due set, those due by then (the marker).
func (q *markQueue) take(due time.Time) []markJob {
	q.mu.Lock()
	defer q.mu.Unlock()
	i := 0
	for i < len(q.jobs) && (due.IsZero() || !q.jobs[i].due.After(due)) {
		i++
	}
	if i == 0 {
		return nil
	}
	out := append([]markJob(nil), q.jobs[:i]...)
	q.jobs = q.jobs[i:]
	q.cond.Broadcast()
	return out
}

// next returns when the oldest job is due, or false when none waits.
func (q *markQueue) next() (time.Time, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.jobs) == 0 {
		return time.Time{}, false
	}
	return q.jobs[0].due, true
}

// close wakes the marker for its last round; put no longer waits.
func (q *markQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.cond.Broadcast()
	q.mu.Unlock()
	q.signal()
}

func (q *markQueue) isClosed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closed
}

// toLease turns jobs into the marks a claim carries.
func toLease(jobs []markJob) []*lease.Mark {
	out := make([]*lease.Mark, len(jobs))
	for i, j := range jobs {
		out[i] = &lease.Mark{Token: j.token, Seqs: j.seqs}
	}
	return out
}

// marked records one mark's outcome: counters, observer, progress, and the
// warning for rows whose lease passed to another claim.
func (r *Relay) marked(d time.Duration, n int, marked int64, err error) {
	r.obs.Marked(d, n, marked, err)
	if err != nil {
		r.progress.marks.fail(time.Now(), err)
		return
	}
	r.progress.marks.ok()
	r.stats.marked.Add(marked)
	if marked < int64(n) {
		r.log.Warn("lease lost before mark: another claim holds these events and publishes them again",
			zap.Int("events", n), zap.Int64("marked", marked))
	}
}

// runMarker marks the delivered chunks that no claim carried within
// markDelay, retrying a failed mark with backoff (up to 5 attempts: then
// the rows are published again after their lease, which at-least-once
// allows). When the queue is closed it marks everything left and returns;
// when work is done first (a stopping relay's ShutdownGrace has passed)
// it returns at once, counting what it could not mark.
func (r *Relay) runMarker(work context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		closed := r.marks.isClosed()
		var due time.Time
		if !closed {
			due = time.Now()
		}
		for _, job := range r.marks.take(due) {
			r.markAlone(work, job)
		}
		if closed {
			if _, waiting := r.marks.next(); !waiting {
				return
			}
			continue
		}
		wait := time.Hour
		if at, ok := r.marks.next(); ok {
			wait = max(0, time.Until(at))
		}
		resetTimer(timer, wait)
		select {
		case <-r.marks.wake:
		case <-timer.C:
		case <-work.Done():
			// Hard stop: the remaining rows are published again after
			// their lease. A publisher waiting for room in the queue
			// goes on.
			r.marks.close()
			n := 0
			for _, job := range r.marks.take(time.Time{}) {
				n += len(job.seqs)
			}
			if n > 0 {
				r.stop.failedMark(n, work.Err())
			}
			return
		}
	}
}

// markAlone marks one chunk in its own transaction, retrying with backoff.
func (r *Relay) markAlone(work context.Context, job markJob) {
	for attempt := job.tries + 1; ; attempt++ {
		mctx, cancel := context.WithTimeout(work, r.cfg.DBTimeout)
		began := time.Now()
		n, err := r.claimer.MarkPublished(mctx, job.token, job.seqs)
		cancel()
		r.marked(time.Since(began), len(job.seqs), n, err)
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
		d := backoff(50*time.Millisecond, 2*time.Second, attempt)
		if !r.stop.stopping() {
			r.log.Warn("mark published failed; retrying", zap.Error(err), zap.Duration("retry_in", d))
		}
		select {
		case <-work.Done():
		case <-time.After(d):
		}
	}
}
