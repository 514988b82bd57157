package relay

import (
	"context"
	"math"
	"math/rand/v2"
	"time"

	"go.uber.org/zap"

	"github.com/pgoutbox/outbox/lease"
)

// schedule decides when the claimer claims next: at once while claims come
// back full (a backlog), on a wake-up, on the jittered poll ticker, or while
// lingering after a claim that found events.
type schedule struct {
	r      *Relay
	poll   *time.Timer
	linger *time.Timer
	// Lingering: after a claim found events, claim again every gap until
	// activeUntil (see Config.ClaimWindow).
	activeUntil, lastClaim time.Time
	gap                    time.Duration
	rate                   float64    // events per second found by recent claims, smoothed
	backlog                bool       // claim at once
	failures               int        // claims failed in a row
	cause                  wakeCause  // why the current claim runs
	mode                   windowMode // dense or sparse claim window
	lastHit                time.Time  // when a claim last found events
	drained                bool       // a notification was pending when the current claim began
}

func newSchedule(r *Relay) *schedule {
	s := &schedule{r: r, poll: time.NewTimer(jitter(r.cfg.PollInterval, 0.1)), linger: time.NewTimer(time.Hour),
		gap: r.cfg.ClaimWindowPoll, backlog: true} // claim at once on start
	s.linger.Stop()
	return s
}

func (s *schedule) stop() {
	s.poll.Stop()
	s.linger.Stop()
}

// wait blocks until it is time to claim, and returns false when ctx is done.
func (s *schedule) wait(ctx context.Context) bool {
	st := &s.r.stats
	if s.backlog {
		st.wakeBacklog.Add(1)
		s.backlog = false
		s.cause = causeBacklog
	} else {
		select {
		case <-ctx.Done():
			return false
		case <-s.r.wake:
			st.wakeNotify.Add(1)
			s.cause = causeNotify
			s.mode.notified(time.Now())
			// Debounce: a notification claims no sooner than
			// ClaimWindowPoll after the previous claim; the notifications
			// meanwhile are covered by that one claim.
			if !sleepCtx(ctx, time.Until(s.lastClaim.Add(s.r.cfg.ClaimWindowPoll))) {
				return false
			}
		case <-s.poll.C:
			st.wakePoll.Add(1)
			s.cause = causePoll
		case <-s.linger.C:
			st.wakeWindow.Add(1)
			s.cause = causeWindow
		}
	}
	if !sleepCtx(ctx, time.Until(time.Unix(0, s.r.pauseUntil.Load()))) {
		return false
	}
	if !s.r.gate.wait(ctx) {
		return false
	}
	// Drain a pending notification: this claim covers it.
	s.drained = false
	select {
	case <-s.r.wake:
		s.drained = true
		s.mode.notified(time.Now())
	default:
	}
	resetTimer(s.poll, jitter(s.r.cfg.PollInterval, 0.1))
	return true
}

// sleepCtx waits d (nothing when d <= 0) and returns false when ctx ended
// first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// claimFailed waits out the backoff after a failed claim; false when ctx
// ended.
func (s *schedule) claimFailed(ctx context.Context) bool {
	s.failures++
	d := backoff(s.r.cfg.RetryMin, s.r.cfg.RetryMax/4, s.failures)
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
	}
	s.backlog = true
	return true
}

// claimedEmpty schedules after an empty claim that started at began.
func (s *schedule) claimedEmpty(sinceLast time.Duration) {
	s.failures = 0
	s.rate = arrivalRate(s.rate, 0, sinceLast)
	now := time.Now()
	switch {
	case s.mode.dense(now):
		if now.Before(s.activeUntil) {
			s.gap = min(2*s.gap, 4*s.r.cfg.ClaimWindowPoll)
			resetTimer(s.linger, min(s.gap, s.activeUntil.Sub(now)))
		}
	case s.cause == causeWindow:
		// The sparse window's claim came back empty: the hits since the
		// window opened get their own claim, ClaimWindow after the last
		// one, for the events their writers committed without a
		// notification.
		if end := s.lastHit.Add(s.r.cfg.ClaimWindow); end.After(now) {
			s.activeUntil = end
			resetTimer(s.linger, end.Sub(now))
		}
	}
}

// claimedRows schedules after a claim that found n rows; more says it
// stopped at its byte bound with claimable rows left (lease.Batch.More).
func (s *schedule) claimedRows(n int, more bool, sinceLast time.Duration) {
	s.failures = 0
	cfg := &s.r.cfg
	switch {
	case n >= s.r.lease.BatchSize || more:
		// A full batch, by rows or by bytes: a backlog.
		s.backlog = true
	case cfg.ClaimWindow > 0:
		now := time.Now()
		s.lastHit = now
		s.rate = arrivalRate(s.rate, n, sinceLast)
		s.mode.found((s.cause == causeWindow || s.cause == causePoll) && !s.drained, now)
		if !s.mode.dense(now) {
			// Every recent event came with its own notification: one
			// claim ClaimWindow after the first hit instead of one per
			// ClaimWindowPoll (windowMode). Later hits do not push it
			// back, so that notifications arriving more often than the
			// window cannot hide events that came without one; if that
			// claim comes back empty, the next one follows ClaimWindow
			// after the last hit (claimedEmpty).
			if now.Before(s.activeUntil) {
				return
			}
			s.activeUntil = now.Add(cfg.ClaimWindow)
			s.gap = cfg.ClaimWindow
			resetTimer(s.linger, cfg.ClaimWindow)
			return
		}
		s.activeUntil = now.Add(cfg.ClaimWindow)
		// Below busyRate a claim follows every ClaimWindowPoll, for
		// latency. Above it the relay is busy and claims every
		// BusyClaimInterval (20ms by default) instead, taking bigger
		// batches rather than a round trip per few events, which on a
		// small machine takes CPU from the writers (see
		// DefaultBusyClaimInterval).
		s.gap = cfg.ClaimWindowPoll
		if busy(s.rate, s.r.ownedShare) {
			s.gap = max(cfg.BusyClaimInterval, cfg.ClaimWindowPoll)
		}
		resetTimer(s.linger, s.gap)
	}
}

// runClaimer waits for a reason to claim, claims, and hands batches over.
func (r *Relay) runClaimer(ctx context.Context, out chan<- claimed) {
	s := newSchedule(r)
	defer s.stop()
	for {
		if !s.wait(ctx) {
			return
		}
		began := time.Now()
		sinceLast := began.Sub(s.lastClaim)
		s.lastClaim = began
		b, no, err := r.claim(ctx)
		if err != nil {
			if ctx.Err() != nil || !s.claimFailed(ctx) {
				return
			}
			continue
		}
		if len(b.Rows) == 0 {
			s.claimedEmpty(sinceLast)
			continue
		}
		select {
		case out <- claimed{Batch: b, no: no}:
			r.gate.batchSent()
		case <-ctx.Done():
			// Shutting down with a batch nobody will publish: give it back.
			r.releaseBatch(b)
			return
		}
		s.claimedRows(len(b.Rows), b.More, sinceLast)
	}
}

// claim runs one claim, carrying the marks waiting (marks.go), and records
// it (stats, observer, progress, logs).
func (r *Relay) claim(ctx context.Context) (*lease.Batch, uint64, error) {
	no := r.gate.next()
	jobs := r.marks.take(time.Time{})
	marks := toLease(jobs)
	// The claim is not cancelled when the shutdown begins: a statement
	// cancelled after the server committed it would leave rows leased by
	// a claim nobody holds until the lease ends. It is bounded by
	// DBTimeout, and by ShutdownGrace after the shutdown timeout; a batch
	// claimed during shutdown is released by the caller.
	cctx, cancel := context.WithTimeout(r.stop.final, r.cfg.DBTimeout)
	began := time.Now()
	b, err := r.claimer.Claim(cctx, marks...)
	cancel()
	d := time.Since(began)
	r.stats.claims.Add(1)
	if err != nil && len(jobs) > 0 {
		r.marks.putBack(jobs) // the marker marks them alone
	} else {
		for _, m := range marks {
			r.marked(d, len(m.Seqs), m.Marked, nil)
		}
	}
	if err != nil {
		r.obs.Claimed(d, 0, 0, err)
		if ctx.Err() == nil {
			r.progress.claims.fail(time.Now(), err)
			r.logClaimError(err)
		} else {
			r.stop.failedClaim(err)
		}
		return nil, no, err
	}
	r.progress.claims.ok()
	r.watchOwnership(time.Now())
	r.obs.Claimed(d, len(b.Rows), b.TakenOver, nil)
	if len(b.Rows) == 0 {
		r.stats.emptyClaims.Add(1)
		return b, no, nil
	}
	r.progress.claimedRows(time.Now())
	if b.TakenOver > 0 {
		r.log.Warn("lease takeover: took events whose lease had expired; a relay died or stalled, they may be published again",
			zap.Int("events", b.TakenOver))
	}
	if ce := r.log.Check(zap.DebugLevel, "claimed"); ce != nil {
		ce.Write(zap.Int("events", len(b.Rows)), zap.Uint64("claim_no", no), zap.Stringer("claim_token", b.Token))
	}
	return b, no, nil
}

// logClaimError logs a failed claim: the first failure of a streak and then
// one line per 10 failures, so a database that stays down does not flood
// the log (Health reports the streak).
func (r *Relay) logClaimError(err error) {
	n := r.progress.claims.count.Load()
	if n != 1 && n%10 != 0 {
		return
	}
	fields := []zap.Field{zap.Error(err), zap.Int64("failures", n)}
	switch {
	case lease.IsMissingTable(err):
		r.log.Error("outbox table not found: run `outbox-relay migrate`", append(fields, zap.String("table", r.lease.Table))...)
	case lease.IsSchemaMismatch(err):
		r.log.Error("outbox table has the wrong shape: run `outbox-relay migrate`", append(fields, zap.String("table", r.lease.Table))...)
	default:
		r.log.Warn("claim failed; retrying with backoff", fields...)
	}
}

// arrivalRate folds a claim that found n events, elapsed after the previous
// claim started, into the rate estimate (events/s): an exponentially
// decayed count of the events found over the last rateWindow, divided by
// rateWindow. Averaging over a window, not per claim, keeps random bursts
// of a moderate rate from looking busy.
func arrivalRate(prev float64, n int, elapsed time.Duration) float64 {
	if elapsed < 0 {
		elapsed = 0
	}
	count := prev*rateWindow.Seconds()*math.Exp(-elapsed.Seconds()/rateWindow.Seconds()) + float64(n)
	return count / rateWindow.Seconds()
}

// busyRate (events/s): above it, found by recent claims, the relay claims
// every Config.BusyClaimInterval (or ClaimWindowPoll when longer).
const busyRate = 2000

// busy reports whether the table is busy: rate is what this relay's
// claims found (events/s), share the part of the key partitions it owns
// (0 before it knows: taken as all). The threshold is the table's rate,
// estimated as rate / share, because what busy mode saves, claims on the
// one database, is paid for every relay's claims: three relays sharing
// 2,000 events/s each find about 670/s, and each claiming every
// ClaimWindowPoll cost ten times the claims of one busy relay.
func busy(rate, share float64) bool {
	if share <= 0 || share > 1 {
		share = 1
	}
	return rate >= busyRate*share
}

// rateWindow is arrivalRate's averaging window.
const rateWindow = 50 * time.Millisecond

func resetTimer(t *time.Timer, d time.Duration) {
	t.Stop()
	t.Reset(d)
}

// jitter returns d ± frac·d, uniformly.
func jitter(d time.Duration, frac float64) time.Duration {
	return d + time.Duration(float64(d)*frac*(2*rand.Float64()-1))
}

// backoff returns min·2^(n-1) capped at max, ±20% jitter.
func backoff(min, max time.Duration, n int) time.Duration {
	d := min
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	return jitter(d, 0.2)
}
