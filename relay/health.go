package relay

import (
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/produce"
)

// Health says whether the relay is moving events: the answer behind
// /readyz's "relay" check and the outbox_relay_stalled metric. Connections
// being open is not enough: a relay whose claims, publishes or marks all
// fail, or that claims rows and publishes none of them, is stalled.
type Health struct {
	// Moving is false once one of the steps below has made no progress
	// for longer than Config.StallTimeout.
	Moving bool `json:"moving"`
	// Step names the stalled step: "ownership" (the relay owns no key
	// partition while other relays run, or a relay of an older version
	// keeps it from claiming), "claim" (every claim failed), "publish"
	// (rows were claimed but none was published or dead-lettered, or
	// publishes have failed for a condition of the Kafka cluster, even if
	// a few rows got through) or "mark" (every mark failed). Empty while
	// moving.
	Step string `json:"step,omitempty"`
	// Reason says what was seen, with the last error.
	Reason string `json:"reason,omitempty"`
	// Since is when the stalled step last made progress (or started
	// failing).
	Since time.Time `json:"since,omitzero"`
	// ClaimFailures and MarkFailures count the claims and mark statements
	// that failed in a row (0 after a success).
	ClaimFailures int64 `json:"claim_failures"`
	MarkFailures  int64 `json:"mark_failures"`
	// PublishStalledFor is how long rows have been claimed without any of
	// them being published or dead-lettered (0 when none waits).
	PublishStalledFor time.Duration `json:"publish_stalled_for"`
}

// streak counts consecutive failures of one step.
type streak struct {
	count atomic.Int64
	since atomic.Int64 // unix nanos of the first failure in a row
	last  atomic.Pointer[string]
}

func (s *streak) fail(now time.Time, err error) {
	if s.count.Add(1) == 1 {
		s.since.Store(now.UnixNano())
	}
	msg := err.Error()
	s.last.Store(&msg)
}

func (s *streak) ok() {
	if s.count.Load() != 0 {
		s.count.Store(0)
		s.since.Store(0)
	}
}

// progress tracks whether events are moving (see Health).
type progress struct {
	stallAfter time.Duration
	claims     streak
	marks      streak
	// waiting is when rows were first claimed after the last row was
	// resolved (published or dead-lettered): unix nanos, 0 when none waits.
	waiting atomic.Int64
	// publishErr is the last publish error, for the reason.
	publishErr atomic.Pointer[string]
	// inFlight is when the publish under way started (unix nanos), 0 if none.
	inFlight atomic.Int64
	// outage is when the current run of publishes failing for a condition
	// of the cluster began (unix nanos): set by a publish with any message
	// failing so (produce.RetryOutage: unreachable, not enough replicas, no
	// leader, ...), cleared by one the broker accepted in full. Rows
	// published meanwhile (a chunk split by the outage's start, a partition
	// whose broker still answers) do not end it, so a broker outage is one
	// stall, not one per partial success. outageErr is the first such
	// error of the last failing publish: the condition and, where the
	// cluster metadata said, the partition's leader.
	outage    atomic.Int64
	outageErr atomic.Pointer[string]
	// unowned is since when the relay has owned no key partition while
	// other relays run (unix nanos, 0: it owns some, or runs alone), and
	// ownerWhy says why.
	unowned  atomic.Int64
	ownerWhy atomic.Pointer[string]
}

// ownership records what the claimer owned after a claim.
func (p *progress) ownership(now time.Time, o claim.Ownership) {
	var why string
	switch {
	case o.Replaced:
		why = fmt.Sprintf("a later process started with this relay ID (%s) took its membership and key partitions over: this one claims nothing more; stop it (two processes must not share a --relay-id)", o.Member)
	case o.Legacy != "":
		why = fmt.Sprintf("a relay of an older version, without key partitions, holds leases on the table (locked_by %s): this relay claims nothing until it stops; stop or upgrade it", o.Legacy)
	case o.Owned == 0 && o.Partitions > 0 && o.Members > 1:
		why = fmt.Sprintf("owns none of the %d key partitions while %d relays run", o.Partitions, o.Members)
		if o.Members > o.Partitions {
			why += fmt.Sprintf(": there are more relays than partitions (migrate a new table with --partitions >= %d, or run fewer relays)", o.Members)
		} else {
			why += ": the relays that own them have not given them back (see `outbox-relay status`)"
		}
	default:
		p.unowned.Store(0)
		return
	}
	p.ownerWhy.Store(&why)
	p.unowned.CompareAndSwap(0, now.UnixNano())
}

// publishAnswered records a publish that started at began, with its
// results: a message failing for a condition of the cluster
// (produce.RetryOutage) starts (or continues) an outage, a publish with
// none ends it; the condition reported is the first such message's. A
// publish with a failed message is the last publish error.
func (p *progress) publishAnswered(began time.Time, results []produce.Result) {
	var cond, first *produce.Result
	failed := 0
	for i := range results {
		res := &results[i]
		if !res.Outcome.Failed() {
			continue
		}
		failed++
		if first == nil {
			first = res
		}
		if cond == nil && res.Outcome == produce.RetryOutage {
			cond = res
		}
	}
	if first != nil {
		msg := fmt.Sprintf("publish: %d of %d messages failed: %v", failed, len(results), first.Err)
		p.publishErr.Store(&msg)
	}
	if cond == nil {
		p.outage.Store(0)
		return
	}
	msg := fmt.Sprintf("%s: %v", cond.Reason, cond.Err)
	p.outageErr.Store(&msg)
	p.outage.CompareAndSwap(0, began.UnixNano())
}

// claimedRows records a claim that returned rows.
func (p *progress) claimedRows(now time.Time) { p.waiting.CompareAndSwap(0, now.UnixNano()) }

// resolved records rows published or dead-lettered.
func (p *progress) resolved() { p.waiting.Store(0) }

// health evaluates the steps at now.
func (p *progress) health(now time.Time) Health {
	h := Health{Moving: true, ClaimFailures: p.claims.count.Load(), MarkFailures: p.marks.count.Load()}
	if w := p.waiting.Load(); w != 0 {
		h.PublishStalledFor = now.Sub(time.Unix(0, w))
	}
	stalled := func(step string, since int64, reason string) {
		if since == 0 || !h.Moving || now.Sub(time.Unix(0, since)) <= p.stallAfter {
			return
		}
		h.Moving, h.Step, h.Since = false, step, time.Unix(0, since)
		h.Reason = fmt.Sprintf("%s for %s: %s", reason, now.Sub(h.Since).Round(time.Second), stepDetail(step, p, now))
	}
	if u := p.unowned.Load(); u != 0 {
		if why := p.ownerWhy.Load(); why != nil {
			stalled("ownership", u, *why)
		}
	}
	if h.ClaimFailures > 0 {
		stalled("claim", p.claims.since.Load(), fmt.Sprintf("%d claims failed in a row", h.ClaimFailures))
	}
	if w, o := p.waiting.Load(), p.outage.Load(); o != 0 && (w == 0 || o <= w) {
		stalled("publish", o, "publishes fail for a condition of the Kafka cluster")
	} else {
		stalled("publish", w, "rows claimed but none published or dead-lettered")
	}
	if h.MarkFailures > 0 {
		stalled("mark", p.marks.since.Load(), fmt.Sprintf("%d marks failed in a row", h.MarkFailures))
	}
	return h
}

// stepDetail is the detail of a stalled step at now: its last error.
func stepDetail(step string, p *progress, now time.Time) string {
	var last *string
	switch step {
	case "ownership":
		return "see `outbox-relay status` for who owns the key partitions"
	case "claim":
		last = p.claims.last.Load()
	case "mark":
		last = p.marks.last.Load()
	case "publish":
		if p.outage.Load() != 0 {
			if e := p.outageErr.Load(); e != nil {
				return "last error: " + *e
			}
		}
		if f := p.inFlight.Load(); f != 0 {
			return fmt.Sprintf("a publish has been in flight for %s (broker not answering?)", now.Sub(time.Unix(0, f)).Round(time.Second))
		}
		last = p.publishErr.Load()
		if last == nil {
			return "every claimed row was held back behind an earlier event of its aggregate"
		}
	}
	if last == nil {
		return "unknown"
	}
	return "last error: " + *last
}

// watch logs one line when the relay stops moving events and one when it
// moves again, checking every tick of c until stop is closed.
func (p *progress) watch(stop <-chan struct{}, c clock, tick time.Duration, log *zap.Logger) {
	t := c.NewTicker(tick)
	defer t.Stop()
	var stalled *Health
	for {
		select {
		case <-stop:
			return
		case <-t.C():
		}
		h := p.health(c.Now())
		switch {
		case !h.Moving && stalled == nil:
			stalled = &h
			log.Error("relay stalled: events are not moving", zap.String("step", h.Step), zap.String("reason", h.Reason), zap.Time("since", h.Since))
		case h.Moving && stalled != nil:
			log.Info("relay moving again", zap.String("step", stalled.Step), zap.Duration("stalled_for", c.Now().Sub(stalled.Since).Round(time.Second)))
			stalled = nil
		}
	}
}
