package relay

import (
	"context"
	"sync/atomic"
)

// claimGate numbers claims and, after the publisher gave rows back, holds
// the claimer until every batch it had claimed so far is settled.
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
// The claimer calls next before each claim, sent after handing a batch to
// the publisher, and pass before starting a claim; the publisher calls
// settled after each batch and flush when a batch gave rows back (before
// settled).
type claimGate struct {
	started   atomic.Uint64 // claims started (the last claim's number)
	sent      atomic.Uint64 // batches handed to the publisher
	done      atomic.Uint64 // batches the publisher settled
	flushWant atomic.Bool   // a batch gave rows back: drain before claiming
	wake      signal        // a batch was settled
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

// wait blocks until pass, or ctx is done (it returns false then).
func (g *claimGate) wait(ctx context.Context) bool {
	for !g.pass() {
		select {
		case <-ctx.Done():
			return false
		case <-g.wake.C():
		}
	}
	return true
}
