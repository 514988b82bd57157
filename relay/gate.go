package relay

import (
	"context"
	"time"
)

// claimGate is how the publisher holds the claimer back: after it gave
// rows back, until every batch claimed so far is settled (flush), and
// after a publish that found the broker down, for a while (pause). It also
// numbers the claims.
//
// Why: rows given back make the batches claimed before the give-back
// committed hold back their aggregates' later rows (see holdback), and those
// held rows are given back in turn. While the claimer keeps claiming ahead
// of the publisher — which it does back to back on a backlog — each
// give-back would reach the claims started meanwhile, and the chain would
// never end: the relay claims and releases the same rows forever (seen after
// a 70 s broker blackhole under 1,000 events/s). Waiting once for the
// pipeline to settle ends the chain: the next claim starts after every
// give-back committed and takes the rows in seq order. The wait costs one
// pipeline drain per batch that gave rows back, and nothing otherwise.
//
// The claimer calls next before each claim (Relay.claim), batchSent after
// handing a batch to the publisher (runClaimer), and wait before starting
// a claim (scheduler.wait); the publisher calls settled after each batch
// (publishBatch, runPublisher), flush when a batch gave rows back (before
// settled: Relay.settle, Relay.keepLease), and pause after an outage
// (runPublisher).
type claimGate struct {
	s *shared[gateState]
}

// gateState is the claim gate's state, one shared value (shared.go).
type gateState struct {
	started   uint64 // claims started (the last claim's number)
	sent      uint64 // batches handed to the publisher
	done      uint64 // batches the publisher settled
	flushWant bool   // a batch gave rows back: drain before claiming
	// pauseUntil holds the claimer back after a publish failed for a
	// whole batch: the broker is down, claiming more only churns rows.
	pauseUntil time.Time
}

func newClaimGate() *claimGate { return &claimGate{s: newShared(gateState{})} }

// next returns the number of the claim about to start: 1, 2, ...
func (g *claimGate) next() (no uint64) {
	g.s.update(func(s *gateState) bool { s.started++; no = s.started; return false })
	return no
}

// lastStarted returns the number of the last claim started.
func (g *claimGate) lastStarted() (no uint64) {
	g.s.update(func(s *gateState) bool { no = s.started; return false })
	return no
}

// batchSent records a batch handed to the publisher.
func (g *claimGate) batchSent() {
	g.s.update(func(s *gateState) bool { s.sent++; return false })
}

// flush asks the claimer to wait for every batch it claimed to be settled
// before it claims again.
func (g *claimGate) flush() {
	g.s.update(func(s *gateState) bool { s.flushWant = true; return false })
}

// settled records that the publisher finished a batch: published, marked
// (queued), given back or dead-lettered. It wakes a waiting claimer.
func (g *claimGate) settled() {
	g.s.update(func(s *gateState) bool { s.done++; return true })
}

// pause holds the claimer back until until.
func (g *claimGate) pause(until time.Time) {
	g.s.update(func(s *gateState) bool { s.pauseUntil = until; return false })
}

// pass reports whether a claim may start now: no flush is pending, or every
// batch sent is settled (then the flush is over).
func (g *claimGate) pass() bool {
	ok, _ := g.check()
	return ok
}

// check is pass, and returns the channel closed at the gate's next change
// too.
func (g *claimGate) check() (ok bool, changed <-chan struct{}) {
	changed = g.s.update(func(s *gateState) bool {
		ok = !s.flushWant || s.done == s.sent
		s.flushWant = s.flushWant && !ok
		return false
	})
	return ok, changed
}

// wait blocks, on clock c, until the pause is over and then until pass, or
// until ctx is done (it returns false then).
func (g *claimGate) wait(ctx context.Context, c clock) bool {
	var until time.Time
	g.s.update(func(s *gateState) bool { until = s.pauseUntil; return false })
	if !sleepCtx(ctx, c, until.Sub(c.Now())) {
		return false
	}
	for {
		ok, changed := g.check()
		if ok {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-changed:
		}
	}
}
