package relay

import "time"

// The claim schedule decides when the claimer claims next: at once while
// claims come back full (a backlog), on a wake-up (debounced: a
// notification claims no sooner than ClaimWindowPoll after the previous
// claim), on the jittered poll timer, or while lingering in the claim
// window after a claim that found events, densely or sparsely (windowMode)
// and, when the table is busy, every BusyClaimInterval (busy).
//
// It is a pure function, schedConfig.next(state, event) -> (state,
// decision), so that each of its modes is a row of a table test
// (schedule_test.go); the claimer (scheduler.go) feeds it the events and
// carries out its decisions with the timers.

// schedConfig is what the schedule reads of the relay's configuration.
type schedConfig struct {
	batchSize int // lease.Config.BatchSize: a claim this full is a backlog
	// window, windowPoll and busyGap are Config.ClaimWindow,
	// ClaimWindowPoll and BusyClaimInterval.
	window, windowPoll, busyGap time.Duration
	// targeting: wake-ups say whether an untargeted notification (one
	// that named no key partitions) arrived (schedEvent.untargeted), as
	// a Service's listener does.
	targeting bool
}

// schedState is the schedule's state between events. Its zero value is
// not a start: use schedConfig.start.
type schedState struct {
	backlog  bool      // claim at once, without waiting for a wake-up
	failures int       // claims failed in a row
	cause    wakeCause // why the current claim runs
	drained  bool      // a notification was pending when the current claim began
	// untargeted: a notification that named no key partitions arrived
	// since the previous wake-up (listen.Listener.Untargeted); followUp
	// is when the claim that looks for the events committed after such a
	// notification without one is due (empty).
	untargeted bool
	followUp   time.Time
	// untargetedAt is when a wake-up last saw an untargeted notification.
	untargetedAt time.Time
	// lastClaim is when the current claim began, sinceLast the time from
	// the previous claim's start to it (for the rate).
	lastClaim time.Time
	sinceLast time.Duration
	// Lingering: after a claim found events, claim again every gap until
	// activeUntil (see Config.ClaimWindow). lastHit is when a claim last
	// found events.
	activeUntil, lastHit time.Time
	gap                  time.Duration
	rate                 float64    // events per second found by recent claims, smoothed
	mode                 windowMode // dense or sparse claim window
}

// schedEventKind says what happened (schedEvent).
type schedEventKind int

const (
	schedWoke    schedEventKind = iota // the claimer woke up for cause
	schedBegin                         // a claim begins; drained: a notification was pending
	schedFailed                        // the claim failed
	schedClaimed                       // the claim found rows (0: empty); more: claim again at once (claim.Batch.More: its byte bound, or ownership moved)
)

// schedEvent is one input of the schedule.
type schedEvent struct {
	kind  schedEventKind
	at    time.Time
	cause wakeCause // schedWoke
	// untargeted (schedWoke, schedBegin): a notification that named no
	// key partitions arrived since the previous event that said.
	untargeted bool
	drained    bool    // schedBegin
	rows       int     // schedClaimed
	more       bool    // schedClaimed: claim.Batch.More
	share      float64 // schedClaimed: the part of the key partitions owned (busy)
}

// schedDecision is what the claimer does after an event.
type schedDecision struct {
	// notBefore: wait until then before claiming (the debounce of a
	// notification); zero: no wait.
	notBefore time.Time
	// linger: restart the claim-window timer to fire after lingerIn.
	linger   bool
	lingerIn time.Duration
	// poll: restart the poll timer (a jittered Config.PollInterval).
	poll bool
	// retry: wait backoff.Delay(Config.RetryMin, Config.RetryMax/4, retry)
	// before the next claim (0: no wait).
	retry int
}

// start is the state of a new claimer: it claims at once.
func (c schedConfig) start() schedState {
	return schedState{backlog: true, gap: c.windowPoll}
}

// next returns the state after e and what to do about it.
func (c schedConfig) next(s schedState, e schedEvent) (schedState, schedDecision) {
	var d schedDecision
	switch e.kind {
	case schedWoke:
		s.backlog, s.cause, s.untargeted = false, e.cause, e.untargeted
		if e.untargeted {
			s.untargetedAt = e.at
		}
		if e.cause == causeNotify {
			s.mode.notified(e.at)
			// Debounce: a notification claims no sooner than
			// ClaimWindowPoll after the previous claim; the notifications
			// meanwhile are covered by that one claim.
			d.notBefore = s.lastClaim.Add(c.windowPoll)
		}
	case schedBegin:
		// A notification pending now is covered by this claim.
		s.drained = e.drained
		if e.untargeted {
			s.untargeted, s.untargetedAt = true, e.at
		}
		if e.drained {
			s.mode.notified(e.at)
		}
		d.poll = true
		s.sinceLast, s.lastClaim = e.at.Sub(s.lastClaim), e.at
	case schedFailed:
		s.failures++
		d.retry = s.failures
		s.backlog = true
	case schedClaimed:
		s.failures = 0
		if e.rows == 0 && !e.more {
			return c.empty(s, e.at)
		}
		return c.found(s, e)
	}
	return s, d
}

// empty schedules after an empty claim that ended at now.
func (c schedConfig) empty(s schedState, now time.Time) (schedState, schedDecision) {
	var d schedDecision
	if s.untargeted && c.window > 0 {
		// A notification that named no key partitions (a debounced
		// writer's) stands for the events committed after it without one,
		// in any relay's partitions: this claim found none of this relay's,
		// so a claim ClaimWindow later looks for them, as the window after
		// a hit does, whatever the window's mode.
		s.followUp = now.Add(c.window)
	}
	s.rate = arrivalRate(s.rate, 0, s.sinceLast)
	s.mode.advance(now)
	switch {
	case s.mode.dense(now):
		if now.Before(s.activeUntil) {
			s.gap = min(2*s.gap, 4*c.windowPoll)
			d.linger, d.lingerIn = true, min(s.gap, s.activeUntil.Sub(now))
		}
	case s.cause == causeWindow:
		// The sparse window's claim came back empty: the hits since the
		// window opened get their own claim, ClaimWindow after the last
		// one, for the events their writers committed without a
		// notification.
		if end := s.lastHit.Add(c.window); end.After(now) {
			s.activeUntil = end
			d.linger, d.lingerIn = true, end.Sub(now)
		}
	}
	if !d.linger && s.followUp.After(now) {
		d.linger, d.lingerIn = true, s.followUp.Sub(now)
	}
	return s, d
}

// everyTx reports whether the claim that just found events was woken by
// notifications that named key partitions, and none in the last
// unnotifiedFor did not: their writers notify in every transaction (the
// README's plain SQL, outbox.WakeupEveryTx; a debounced writer's
// notification names none), so no event of theirs hides behind the hit,
// and the sparse window's claim after it is not needed. With several
// relays that claim was most of their empty claims.
func (c schedConfig) everyTx(s schedState, now time.Time) bool {
	return c.targeting && s.cause == causeNotify && !s.untargeted && (s.untargetedAt.IsZero() || now.Sub(s.untargetedAt) >= unnotifiedFor)
}

// found schedules after a claim that found e.rows rows, at e.at (once
// the batch was handed to the publisher).
func (c schedConfig) found(s schedState, e schedEvent) (schedState, schedDecision) {
	var d schedDecision
	now := e.at
	switch {
	case e.rows >= c.batchSize || e.more:
		// A full batch, by rows or by bytes: a backlog.
		s.backlog = true
		return s, d
	case c.window <= 0:
		return s, d
	}
	s.lastHit = now
	s.rate = arrivalRate(s.rate, e.rows, s.sinceLast)
	s.mode.found((s.cause == causeWindow || s.cause == causePoll) && !s.drained, now)
	s.mode.advance(now)
	if !s.mode.dense(now) {
		// Every recent event came with its own notification: one claim
		// ClaimWindow after the first hit instead of one per
		// ClaimWindowPoll (windowMode). Later hits do not push it back,
		// so that notifications arriving more often than the window
		// cannot hide events that came without one; if that claim comes
		// back empty, the next one follows ClaimWindow after the last hit
		// (empty).
		if now.Before(s.activeUntil) || c.everyTx(s, now) {
			return s, d
		}
		s.activeUntil = now.Add(c.window)
		s.gap = c.window
		d.linger, d.lingerIn = true, c.window
		return s, d
	}
	s.activeUntil = now.Add(c.window)
	// Below busyRate a claim follows every ClaimWindowPoll, for latency.
	// Above it the relay is busy and claims every BusyClaimInterval (20ms
	// by default) instead, taking bigger batches rather than a round trip
	// per few events, which on a small machine takes CPU from the writers
	// (see DefaultBusyClaimInterval).
	s.gap = c.windowPoll
	if busy(s.rate, e.share) {
		s.gap = max(c.busyGap, c.windowPoll)
	}
	d.linger, d.lingerIn = true, s.gap
	return s, d
}
