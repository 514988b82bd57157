// Package relay runs the outbox relay: it claims batches of outbox rows,
// publishes them to Kafka outside any database transaction, and marks the
// delivered rows published, woken by a notification, by a jittered poll
// timer, or at once while claims come back full.
//
// Start with NewService: it wires the claimer (package lease), the Kafka
// publisher (package kafka) and the LISTEN session (package notify) from one
// ServiceConfig, and Run moves events until its context ends. Health says
// whether events are moving; Stats counts what happened; an Observer (and
// NewTracingObserver) sees every event's outcome. New builds the engine alone
// around a Claimer and a Publisher of your own (tests: outboxtest.Publisher).
//
// Guarantees: at-least-once delivery (a row is marked only after Kafka
// acknowledged it with acks=all; a crash in between publishes it again, with
// the same event_id), and per-aggregate order: an event is never published
// before an earlier event (by seq) of its aggregate. If an event fails, the
// later events of its aggregate are neither published nor marked until it
// succeeds, while other aggregates go on.
package relay

import (
	"context"
	"sync"
	"time"

	"github.com/pgoutbox/outbox/internal/backoff"
	"github.com/pgoutbox/outbox/internal/claim"
)

// Run starts four goroutines, and each piece of state has one owner:
//
//   - the claimer (Run's own goroutine, runClaimer) decides when to claim
//     (the claim schedule: scheduler, schedule.go), claims, and hands each
//     batch to the publisher; it owns the schedule, its timers and what it
//     saw of the key partitions (recordOwnership).
//   - the publisher (runPublisher) publishes one batch at a time, in claim
//     order, and gives back what it could not publish (batch.go, relay.go);
//     it owns the hold-back state (holdback.go, where the ordering
//     invariant is stated) and the failure log (faillog.go).
//   - the marker (runMarker) marks the delivered rows that no claim carried
//     into its own transaction (marks.go).
//   - the health watcher (progress.watch) logs when the relay stops moving
//     events and when it moves again (health.go).
//
// Between them: a channel of one batch from the claimer to the publisher;
// the mark queue (markQueue, marks.go) from the publisher to the marker
// and to the claimer, whose claims carry the marks waiting; and, back from
// the publisher to the claimer, the claim gate (claimGate, gate.go: the
// wait after a give-back until every batch claimed so far is settled, and
// the pause after an outage). The mark queue and the claim gate are each
// one shared value (shared.go): one lock, and waiters wait on its changes.
// Every outcome is recorded once
// (the Relay.record* methods, record.go) into the Stats counters, the Observer and the
// health progress, which any goroutine may update; every time reading,
// timer and sleep goes through the Relay's clock (clock.go).
//
// Memory is bounded by about three batches, each of at most
// lease.Config.BatchSize rows and lease.Config.MaxBatchBytes of payloads:
// the one the publisher publishes, one waiting in the channel, and one the
// claimer holds until the channel takes it. The mark queue holds only the
// seqs of delivered chunks, at most maxPendingMarks of them (the publisher
// waits for room).
//
// The pipeline, as Run starts it:
//
//	  wake-ups (notify), the poll timer, the claim-window timer
//	       |
//	       v
//	  +---------+  batches (chan, 1 slot)  +-----------+
//	  | claimer | -----------------------> | publisher |
//	  +---------+                          +-----------+
//	    ^    ^     claimGate: flush, pause      |   |
//	    |    +----------------------------------+   | delivered chunks
//	    |                                           v
//	    +--- a claim takes all that waits ---- markQueue ---- what is due ---> marker
//
// The claimer's loop is runClaimer, the publisher's runPublisher, the
// marker's runMarker, below; the health watcher is progress.watch.

// claimed is a batch with the number of the claim that produced it.
type claimed struct {
	*claim.Batch
	no uint64
}

// Run relays until ctx is done, then shuts down gracefully and returns
// nil: the in-flight publish may take Config.ShutdownTimeout, then
// delivered rows are marked and the rest released within ShutdownGrace,
// and Run returns by then whatever the database does, having logged in
// one line what it could not give back. Database and broker errors are
// logged and retried with backoff; they never end Run.
func (r *Relay) Run(ctx context.Context) error {
	// work outlives ctx by at most ShutdownTimeout: in-flight publishes
	// finish on it. final outlives it by ShutdownGrace more: every
	// statement (the claim in flight, marks, releases, leaving) ends by
	// then.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	final, cancelFinal := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelFinal()
	r.stop.final = final
	stopHard := context.AfterFunc(ctx, func() {
		r.stop.begin(r.clock.Now())
		stopW := r.clock.AfterFunc(r.cfg.ShutdownTimeout, cancelWork)
		stopF := r.clock.AfterFunc(r.cfg.ShutdownTimeout+ShutdownGrace, cancelFinal)
		context.AfterFunc(final, func() { stopW(); stopF() })
	})
	defer stopHard()

	// The pipeline (see the top of this file). It stops from the front:
	// the claimer returns when ctx is done, closing batches; the
	// publisher releases what is left in it and closes the mark queue;
	// the marker marks what waits and returns.
	batches := make(chan claimed, 1) // claimer -> publisher
	stopWatch := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { // health watcher
		defer wg.Done()
		r.progress.watch(stopWatch, r.clock, min(time.Second, r.cfg.StallTimeout/4), r.log)
	}()
	go func() { // marker
		defer wg.Done()
		r.runMarker(final)
	}()
	go func() { // publisher
		defer wg.Done()
		defer r.marks.close()
		r.runPublisher(ctx, work, batches)
	}()
	r.runClaimer(ctx, batches) // claimer: Run's own goroutine
	close(batches)
	close(stopWatch)
	wg.Wait()
	r.fails.stop(r.clock.Now())
	// Everything is marked or released: tell the other relays.
	cctx, cancel := context.WithTimeout(final, r.cfg.DBTimeout)
	if err := r.claimer.Close(cctx); err != nil {
		r.stop.failedLeave(err)
	}
	cancel()
	r.stop.logTo(r.log, r.clock.Now(), r.lease.Lease, r.stats.published.Load())
	return nil
}

// runClaimer waits for a reason to claim (scheduler), claims, and hands
// the batches over to the publisher.
func (r *Relay) runClaimer(ctx context.Context, out chan<- claimed) {
	t := newScheduler(r)
	defer t.stop()
	for {
		if !t.wait(ctx) {
			return
		}
		if t.shared {
			r.claimer.PollShared()
		}
		b, no, err := r.claim(ctx)
		if err != nil {
			if ctx.Err() != nil || !t.failed(ctx) {
				return
			}
			continue
		}
		if len(b.Rows) == 0 {
			// An empty batch may still say to claim again at once: the
			// relays' ownership moved since this relay's last rebalance
			// (claim.Batch.More).
			t.claimed(0, b.More, b.WokeOwners)
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
		t.claimed(len(b.Rows), b.More, b.WokeOwners)
	}
}

// runPublisher publishes batches in claim order. It stops publishing new
// batches when ctx is done and releases them instead; work bounds the
// in-flight publish.
func (r *Relay) runPublisher(ctx, work context.Context, in <-chan claimed) {
	outages := 0 // publishes in a row that delivered nothing
	idle := r.clock.NewTicker(time.Second)
	defer idle.Stop()
	for {
		var b claimed
		select {
		case now := <-idle.C():
			r.fails.tick(now) // an outage may end while no batch comes
			continue
		case next, ok := <-in:
			if !ok {
				return
			}
			b = next
		}
		if ctx.Err() != nil {
			r.releaseBatch(b.Batch)
			r.gate.settled()
			continue
		}
		if r.publishBatch(ctx, work, b) {
			outages++
			// Nothing got through: hold the claimer back, growing with
			// each outage in a row; the broker is likely down.
			pause := backoff.Delay(r.cfg.RetryMin, min(r.cfg.RetryMax, maxOutagePause), outages)
			r.gate.pause(r.clock.Now().Add(pause))
		} else {
			outages = 0
		}
	}
}

// runMarker marks the delivered chunks that no claim carried within
// markDelay, retrying a failed mark with backoff (up to 5 attempts: then
// the rows are published again after their lease, which at-least-once
// allows). When the queue is closed it marks everything left and returns;
// when work is done first (a stopping relay's ShutdownGrace has passed)
// it returns at once, counting what it could not mark.
//
// Each round acts on one view of the queue (markQueue.next), read in one
// step with the channel it then waits on, so that a change after the view
// — the publisher closing the queue, above all — always wakes it.
func (r *Relay) runMarker(work context.Context) {
	timer := r.clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		v := r.marks.next()
		if v.closed {
			jobs := r.marks.take(time.Time{})
			if len(jobs) == 0 {
				return
			}
			for _, job := range jobs {
				r.markAlone(work, job)
			}
			continue
		}
		now := r.clock.Now()
		if v.waiting && !v.due.After(now) {
			for _, job := range r.marks.take(now) {
				r.markAlone(work, job)
			}
			continue
		}
		wait := time.Hour
		if v.waiting {
			wait = v.due.Sub(now)
		}
		resetTimer(timer, wait)
		select {
		case <-v.changed:
		case <-timer.C():
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
