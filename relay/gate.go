package relay

import (
	"context"
	"sync/atomic"
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
// a claim (claimTimer.wait); the publisher calls settled after each batch
// (publishBatch, runPublisher), flush when a batch gave rows back (before
// settled: Relay.settle, Relay.keepLease), and pause after an outage
// (runPublisher).
type claimGate struct {
	started   atomic.Uint64 // claims started (the last claim's number)
	sent      atomic.Uint64 // batches handed to the publisher
	done      atomic.Uint64 // batches the publisher settled
	flushWant atomic.Bool   // a batch gave rows back: drain before claiming
	wake      signal        // a batch was settled
	// pauseUntil (unix nanos) holds the claimer back after a publish
	// failed for a whole batch: the broker is down, claiming more only
	// churns rows.
	pauseUntil atomic.Int64
}

func newClaimGate() *claimGate { return &claimGate{wake: newSignal()} }

// next returns the number of the claim about to start: 1, 2, ...
func (g *claimGate) next() uint64 { return g.started.Add(1) }

// lastStarted returns the number of the last claim started.
func (g *claimGate) lastStarted() uint64 { return g.started.Load() }

// batchSent records a batch handed to the publisher.
func (g *claimGate) batchSent() { g.sent.Add(1) }

// flush asks the claimer to wait for every batch it claimed to be settled
// before it claims again.
func (g *claimGate) flush() { g.flushWant.Store(true) }

// settled records that the publisher finished a batch: published, marked
// (queued), given back or dead-lettered.
func (g *claimGate) settled() {
	g.done.Add(1)
	g.wake.raise()
}

// pass reports whether a claim may start now: no flush is pending, or every
// batch sent is settled (then the flush is over).
func (g *claimGate) pass() bool {
	if !g.flushWant.Load() {
		return true
	}
	if g.done.Load() != g.sent.Load() {
		return false
	}
	// Nothing is in flight, so no batch can ask for another flush between
	// the check above and this store.
	g.flushWant.Store(false)
	return true
}

// pause holds the claimer back until until.
func (g *claimGate) pause(until time.Time) { g.pauseUntil.Store(until.UnixNano()) }

// wait blocks, on clock c, until the pause is over and then until pass, or
// until ctx is done (it returns false then).
func (g *claimGate) wait(ctx context.Context, c clock) bool {
	if !sleepCtx(ctx, c, time.Unix(0, g.pauseUntil.Load()).Sub(c.Now())) {
		return false
	}
	for !g.pass() {
		select {
		case <-ctx.Done():
			return false
		case <-g.wake.C():
		}
	}
	return true
}
