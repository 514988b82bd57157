package relay

import (
	"context"
	"math"
	"time"

	"go.uber.org/zap"

	"github.com/pgoutbox/outbox/internal/backoff"
	"github.com/pgoutbox/outbox/internal/claim"
)

// scheduler runs the claim schedule (schedule.go) for the claimer
// goroutine, which owns it: it feeds the schedule the claimer's events and
// carries out its decisions with the poll and claim-window timers.
type scheduler struct {
	r      *Relay
	cfg    schedConfig
	st     schedState
	poll   timer // the fallback poll (Config.PollInterval, jittered)
	linger timer // the next claim inside the claim window
	cause  wakeCause
	unann  unannounced
	// seenUntargeted is the listener's Untargeted count at the last
	// wake-up (Relay.untargeted); seenAll and seenPoll its Wakeups.
	seenUntargeted    int64
	seenAll, seenPoll int64
	// shared: the claim is a shared poll (takeTurn); polledSlot is the
	// last poll slot this relay took (pollDelay).
	shared     bool
	polledSlot int64
}

func newScheduler(r *Relay) *scheduler {
	cfg := schedConfig{batchSize: r.lease.BatchSize, window: r.cfg.ClaimWindow, windowPoll: r.cfg.ClaimWindowPoll, busyGap: r.cfg.BusyClaimInterval,
		targeting: r.untargeted != nil}
	t := &scheduler{r: r, cfg: cfg, st: cfg.start(), polledSlot: math.MinInt64}
	t.poll = r.clock.NewTimer(t.pollDelay(r.clock.Now()))
	t.linger = r.clock.NewTimer(time.Hour)
	t.linger.Stop()
	return t
}

func (t *scheduler) stop() {
	t.poll.Stop()
	t.linger.Stop()
}

// apply runs the schedule on e and restarts the timers it asks for.
func (t *scheduler) apply(e schedEvent) schedDecision {
	var d schedDecision
	t.st, d = t.cfg.next(t.st, e)
	if d.linger {
		resetTimer(t.linger, d.lingerIn)
	}
	if d.poll {
		resetTimer(t.poll, t.pollDelay(e.at))
	}
	return d
}

// pollInTurns reports whether the relays take turns at the fallback
// poll: this relay is one of several members. Every member takes its
// turns, a relay without notifications (NoNotify, or a Relay of its own
// without a Service) as one whose LISTEN is down: it claims at every slot
// and polls for all in its own (its claimer notifies the others if it
// has a wake channel, claim.Claimer.SetWakeChannel). See pollDelay.
func (r *Relay) pollInTurns() bool {
	return r.pollOf > 1
}

// pollDelay is how long after now the poll timer fires: a jittered
// Config.PollInterval; or, while the relays take turns (pollInTurns), the
// start of this relay's next turn (at once if the current slot is its turn
// and not yet taken): wall-clock slots of PollInterval, slot k belonging
// to the member of Turn k mod Members, so that the relays on a table poll
// it once per PollInterval between them (each poll wakes the owners of
// what it finds, claim.Claimer.PollShared) instead of once each. A
// relay's claims in between do not move its turn: an event written
// without a notification waits at most about one PollInterval, however
// busy the relays are.
//
// A relay whose LISTEN is down claims at every slot (it cannot be woken
// by another's poll) and still polls for all in its own slots, so no slot
// goes unpolled. A listening relay claims at least every sixth of a lease
// (lease.Config.Lease) even when its next turn is further off: its claims
// renew its membership. Such a claim is its own, not a shared poll.
func (t *scheduler) pollDelay(now time.Time) time.Duration {
	r := t.r
	if !r.pollInTurns() {
		return backoff.Jitter(r.cfg.PollInterval, 0.1)
	}
	listening := r.listening != nil && r.listening()
	d := slotDelay(now, r.cfg.PollInterval, t.polledSlot, r.pollTurn, r.pollOf, !listening)
	if listening {
		d = min(d, max(r.cfg.PollInterval, r.lease.Lease/6))
	}
	return d
}

// slotDelay is the time from now to the start of the first wall-clock
// slot of length p numbered above last that has not ended and is this
// relay's: any slot if every, else one whose number k has k mod of ==
// turn. It is 0 when that slot is the current one.
func slotDelay(now time.Time, p time.Duration, last int64, turn, of int, every bool) time.Duration {
	n, pn, o := now.UnixNano(), int64(p), int64(of)
	k := max(n/pn, last+1) // the current slot, or the first after last
	if !every {
		k += ((int64(turn)-k)%o + o) % o
	}
	return time.Duration(max(k*pn-n, 0))
}

// takeTurn reports whether the claim beginning at now is this relay's
// shared poll (turnAt), and records the slot it took.
func (t *scheduler) takeTurn(now time.Time) bool {
	r := t.r
	if !r.pollInTurns() {
		return false
	}
	shared, last := turnAt(now, r.cfg.PollInterval, t.polledSlot, r.pollTurn, r.pollOf, r.listening == nil || !r.listening())
	t.polledSlot = last
	return shared
}

// turnAt reports whether a claim beginning at now is a shared poll:
// now's slot (of length p) is numbered above last, the last slot taken,
// and is the relay's turn (number mod of == turn). Whatever woke the
// claimer, its first claim in its slot is the poll: a busy relay may never
// see its poll timer fire. It returns the last slot taken after the
// claim: now's if it was the relay's turn, or any slot if every (a
// relay whose LISTEN is down claims at every slot, slotDelay).
func turnAt(now time.Time, p time.Duration, last int64, turn, of int, every bool) (shared bool, taken int64) {
	k := now.UnixNano() / int64(p)
	if k <= last {
		return false, last
	}
	mine := k%int64(of) == int64(turn)
	if mine || every {
		return mine, k
	}
	return false, last
}

// wait blocks until it is time to claim: a wake-up (at once on a backlog),
// then the debounce of a notification, and the claim gate (the pause
// after an outage, the wait after a give-back). It returns false when ctx
// is done.
func (t *scheduler) wait(ctx context.Context) bool {
	r := t.r
	cause := causeBacklog
	if !t.st.backlog {
		select {
		case <-ctx.Done():
			return false
		case <-r.wake:
			cause = causeNotify
		case <-t.poll.C():
			cause = causePoll
		case <-t.linger.C():
			cause = causeWindow
		case <-r.settledKick:
			// A batch settled while partitions are being given back.
			cause = causeWindow
		}
	}
	if cause == causeNotify && r.wakeups != nil {
		// Woken only by other relays' polls: a poll's wake-up, for the
		// warning about writers that do not notify and the claim window.
		all, poll := r.wakeups()
		if all-t.seenAll == poll-t.seenPoll && poll != t.seenPoll {
			cause = causePoll
		}
		t.seenAll, t.seenPoll = all, poll
	}
	t.cause = cause
	r.recordWoke(cause)
	if d := t.apply(schedEvent{kind: schedWoke, at: r.clock.Now(), cause: cause, untargeted: t.untargetedSince()}); !d.notBefore.IsZero() {
		if !sleepCtx(ctx, r.clock, d.notBefore.Sub(r.clock.Now())) {
			return false
		}
	}
	if !r.gate.wait(ctx, r.clock) {
		return false
	}
	// The wake-up drained here may be an untargeted notification's that
	// arrived after the count was read above: read it again after.
	drained := drain(r.wake)
	now := r.clock.Now()
	t.shared = t.takeTurn(now)
	t.apply(schedEvent{kind: schedBegin, at: now, drained: drained, untargeted: t.untargetedSince()})
	return true
}

// untargetedSince reports whether an untargeted notification arrived
// since the last call (Relay.untargeted).
func (t *scheduler) untargetedSince() bool {
	if t.r.untargeted == nil {
		return false
	}
	u := t.r.untargeted()
	if u == t.seenUntargeted {
		return false
	}
	t.seenUntargeted = u
	return true
}

// failed waits out the backoff after a failed claim; false when ctx ended.
func (t *scheduler) failed(ctx context.Context) bool {
	d := t.apply(schedEvent{kind: schedFailed, at: t.r.clock.Now()})
	return sleepCtx(ctx, t.r.clock, backoff.Delay(t.r.cfg.RetryMin, t.r.cfg.RetryMax/4, d.retry))
}

// claimed schedules after a claim that found rows (0: empty); more says
// it stopped at its byte bound with claimable rows left (claim.Batch.More).
// With notifications on, it warns when only the poll finds events
// (unannounced).
//
// woke counts the partitions whose owners a shared poll woke
// (claim.Batch.WokeOwners): events its poll found, for the warning.
func (t *scheduler) claimed(rows int, more bool, woke int) {
	now := t.r.clock.Now()
	if t.r.wake != nil && t.unann.claimed(t.cause, rows+woke, now) {
		t.r.log.Warn("events are found only by the fallback poll, no notification announced them: do the writers notify the channel "+
			"the relay listens on (--channel, OUTBOX_CHANNEL), not another one, and with pg_notify when they write plain SQL? "+
			"(Or the LISTEN session is down: see the notify lines.) Until then each event waits up to a poll interval",
			zap.Int("poll_claims_in_a_row", t.unann.inARow), zap.Duration("poll_interval", t.r.cfg.PollInterval))
	}
	t.apply(schedEvent{kind: schedClaimed, at: now, rows: rows, more: more, share: t.r.ownedShare})
}

// claim runs one claim, carrying the marks waiting (marks.go), and records
// it (record, logs).
func (r *Relay) claim(ctx context.Context) (*claim.Batch, uint64, error) {
	no := r.gate.next()
	jobs := r.marks.take(time.Time{})
	marks := toLease(jobs)
	// The claim is not cancelled when the shutdown begins: a statement
	// cancelled after the server committed it would leave rows leased by
	// a claim nobody holds until the lease ends. It is bounded by
	// DBTimeout, and by ShutdownGrace after the shutdown timeout; a batch
	// claimed during shutdown is released by the caller.
	cctx, cancel := context.WithTimeout(r.stop.final, r.cfg.DBTimeout)
	began := r.clock.Now()
	b, err := r.claimer.Claim(cctx, marks...)
	cancel()
	d := r.clock.Now().Sub(began)
	if err != nil && len(jobs) > 0 {
		r.marks.putBack(jobs) // the marker marks them alone
	} else {
		for _, m := range marks {
			r.recordMark(d, len(m.Seqs), m.Marked, nil)
		}
	}
	if err != nil {
		r.recordClaim(d, 0, 0, err, ctx.Err() != nil)
		if ctx.Err() == nil {
			r.logClaimError(err)
		} else {
			r.stop.failedClaim(err)
		}
		return nil, no, err
	}
	r.recordOwnership(r.claimer.Ownership())
	r.recordClaim(d, len(b.Rows), b.TakenOver, nil, false)
	if len(b.Rows) == 0 {
		return b, no, nil
	}
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
	case claim.IsMissingTable(err):
		r.log.Error("outbox table not found: run `outbox-relay migrate`", append(fields, zap.String("table", r.lease.Table))...)
	case claim.IsSchemaMismatch(err):
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
