package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/google/uuid"

	"github.com/pgoutbox/outbox/internal/backoff"
	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/produce"
	"github.com/pgoutbox/outbox/kafka"
)

// Publishing one claimed batch, in three steps: build the next chunk of
// rows that may go out now (nextChunk), publish it and record each row's
// outcome (publishChunk, record), and once the batch is done, settle what
// was not delivered: release it, with a backoff if it failed, or
// dead-letter it (settle). Delivered rows go to the marker as each chunk
// is acknowledged.

// errUndecodableRow marks a row that cannot become a Kafka record (see
// claim.Row.DecodeErr): it is dead-lettered at once, with the reason.
var errUndecodableRow = errors.New("row cannot be published")

// whyUnsent is the reason of rows given back without being tried: the
// broker was down, or the relay is shutting down.
const whyUnsent = "not sent (broker unreachable or shutting down)"

// whyUnread is why a row the claim did not read (claim.Row.Unread) is
// given back.
const whyUnread = "not read: the claim's payloads came to its byte bound (--max-batch-bytes) before it"

// failure is a row whose publish failed, with what the publisher said
// (res: the outcome, the error and its reason) and, for an
// AttemptObserver, the publish call's start and end (stamp).
type failure struct {
	row          claim.Row
	res          produce.Result
	began, ended time.Time
}

// returned is a row given back unpublished without a failure of its own,
// and why: held back (a heldBack reason) or whyUnsent.
type returned struct {
	row claim.Row
	why string
}

// batchRun is one claimed batch on its way through the publisher.
type batchRun struct {
	b    claimed
	rows []claim.Row
	// next is the index in rows of the first row not considered yet.
	next int
	// deadline is when the batch's lease ends, by this host's clock.
	deadline time.Time
	// topics maps each aggregate in the chunk being built to its topic.
	topics map[string]string

	failures []failure
	returned []returned
	// delivered counts rows Kafka acknowledged.
	delivered int
	// outage is set when a publish delivered nothing because the broker
	// did not answer.
	outage bool
}

// maxOutagePause caps how long the claimer waits between attempts while the
// broker is unreachable, so publishing resumes within seconds of its return.
const maxOutagePause = 5 * time.Second

// publishBatch publishes one claimed batch, settles what it could not
// publish, and reports whether it hit an outage (a publish that delivered
// nothing because the broker did not answer).
func (r *Relay) publishBatch(ctx, work context.Context, b claimed) bool {
	defer r.gate.settled()
	r.hb.begin(b.no, b.Claimed)
	br := newBatchRun(b, r.lease.Lease)
	for br.next < len(br.rows) {
		if ctx.Err() != nil || work.Err() != nil {
			// Shutdown: what was not sent yet goes back at once.
			br.abandon(r.hb, whyUnsent)
			break
		}
		r.keepLease(br)
		failed := len(br.failures)
		msgs, rows := br.nextChunk(r.hb, r.message)
		var began time.Time
		if r.att != nil {
			// Failed without a publish call (undecodable).
			began = r.clock.Now()
			br.stamp(failed, began, began)
		}
		if len(msgs) == 0 {
			continue
		}
		failed = len(br.failures)
		results, cutOff := r.publishChunk(work, br.deadline, msgs)
		delivered := br.record(r.hb, rows, results, cutOff)
		var ended time.Time
		if r.att != nil {
			ended = r.clock.Now()
			br.stamp(failed, began, ended)
		}
		r.recordPublished(delivered, began, ended)
		if len(delivered) > 0 {
			r.marks.put(b.Token, seqsOf(delivered), markDelay(&r.cfg))
		}
		if br.delivered == 0 && allOutage(results) {
			// Nothing got through, for a condition of the cluster: stop
			// this batch and hold the claimer back until it passes.
			br.abandon(r.hb, whyUnsent)
			br.outage = true
		}
	}
	r.settle(br)
	return br.outage
}

// settle gives back what the batch did not publish: failed rows with their
// backoff or as dead letters, held-back and unsent rows at once. It records
// what was given back in the hold-back state and, if anything was, asks the
// claimer to let the pipeline settle before its next claim (claimGate).
func (r *Relay) settle(br *batchRun) {
	gave, stuck := r.settleFailures(br.b.Token, br.failures)
	if len(br.returned) > 0 {
		rows := make([]claim.Row, len(br.returned))
		held := int64(0)
		for i, ret := range br.returned {
			rows[i] = ret.row
			if ret.why != whyUnsent {
				held++
			}
		}
		r.recordHeldBack(int(held))
		if ce := r.log.Check(zap.DebugLevel, "giving back events"); ce != nil {
			ce.Write(zap.Int("events", len(rows)), zap.Int64("held_back", held), zap.String("first_reason", br.returned[0].why), zap.Uint64("claim_no", br.b.no))
		}
		if err := r.release(claim.Settle{Token: br.b.Token, Seqs: seqsOf(rows)}); err != nil {
			stuck = append(stuck, rows...)
		} else {
			gave = append(gave, rows...)
		}
	}
	if len(gave) > 0 {
		// The statements above committed; every claim started until now
		// may hold later events of these aggregates without them.
		r.hb.gaveBack(gave, r.gate.lastStarted())
	}
	var busyUntil time.Time
	for i := range stuck {
		r.hb.stuck(&stuck[i], br.deadline)
		busyUntil = br.deadline.Add(stuckMargin)
	}
	r.tellSettled(br.b.Token, busyUntil)
	if len(gave)+len(stuck) > 0 {
		r.gate.flush()
	}
	// A batch that delivered events and had no failure ends a failure
	// episode; one whose events were all held back does not.
	r.fails.flush(r.clock.Now(), br.delivered > 0 && len(br.failures) == 0 && !br.outage)
}

// settleFailures gives failed rows back with a per-row backoff and their
// error, or dead-letters them: at once when the record can never be
// published (produce.DeadLetter, or a row that cannot be decoded), or when
// the attempt just made was their MaxAttempts-th. Failures for a condition
// of the cluster (produce.RetryOutage: unreachable, not enough replicas, no
// leader, timeouts, ...) do not count as attempts: they never make a dead
// letter. Rows with the same outcome, delay and error share a statement.
// It returns the rows it gave back and those it could not (stuck: still
// leased by this relay until the lease ends).
func (r *Relay) settleFailures(token uuid.UUID, fs []failure) (gave, stuck []claim.Row) {
	if len(fs) == 0 {
		return nil, nil
	}
	type key struct {
		dead     bool
		count    bool
		attempts int
		msg      string
	}
	groups := map[key][]claim.Row{}
	var order []key
	for _, f := range fs {
		count := f.res.Outcome != produce.RetryOutage
		attempts := f.row.Attempts
		if count {
			attempts++
		}
		dead := f.res.Outcome == produce.DeadLetter || attempts >= r.cfg.MaxAttempts
		r.recordFailure(&f, r.topicOf(&f.row), dead, attempts)
		k := key{dead: dead, count: count, attempts: attempts, msg: f.res.Err.Error()}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], f.row)
	}
	for _, k := range order {
		rows := groups[k]
		s := claim.Settle{Token: token, Seqs: seqsOf(rows), CountAttempt: k.count, LastError: k.msg}
		var err error
		if k.dead {
			s.Hold = r.cfg.OnDeadLetter == DeadLetterHold
			err = r.deadLetter(s)
		} else {
			s.RetryIn = backoff.Delay(r.cfg.RetryMin, r.cfg.RetryMax, max(k.attempts, 1))
			err = r.release(s)
		}
		if err != nil {
			stuck = append(stuck, rows...)
		} else {
			gave = append(gave, rows...)
		}
	}
	return gave, stuck
}

func (r *Relay) deadLetter(s claim.Settle) error {
	rctx, cancel := context.WithTimeout(r.stop.final, r.cfg.DBTimeout)
	defer cancel()
	n, err := r.claimer.DeadLetter(rctx, s)
	if err != nil {
		if r.stop.stopping() {
			r.stop.failedRelease(len(s.Seqs), err)
			return err
		}
		r.log.Warn("dead-letter failed; the events come back when their lease ends", zap.Error(err), zap.Int("events", len(s.Seqs)))
		return err
	}
	r.recordDeadLettered(int(n))
	return nil
}

// releaseBatch gives a whole batch back unpublished (the relay is
// stopping) and tells the claimer it is settled.
func (r *Relay) releaseBatch(b *claim.Batch) {
	var busyUntil time.Time
	if err := r.release(claim.Settle{Token: b.Token, Seqs: seqsOf(b.Rows)}); err != nil {
		busyUntil = b.Deadline(r.lease.Lease).Add(stuckMargin)
	}
	r.tellSettled(b.Token, busyUntil)
}

// tellSettled tells the claimer that the batch of token is settled and, while
// it gives key partitions back, wakes it to claim, which gives back those
// no unsettled batch holds any more.
func (r *Relay) tellSettled(token uuid.UUID, busyUntil time.Time) {
	r.claimer.Settled(token, busyUntil)
	if r.releasing.Load() > 0 {
		select {
		case r.settledKick <- struct{}{}:
		default:
		}
	}
}

// release gives rows back. A release must happen even once the in-flight
// publish was cut off by the shutdown timeout: each attempt is bounded on
// its own, and tried again a couple of times, since a transient database
// error must not leave the rows held until their lease ends; a stopping
// relay stops trying at ShutdownGrace after the shutdown timeout.
func (r *Relay) release(s claim.Settle) error {
	if len(s.Seqs) == 0 {
		return nil
	}
	var err error
	for attempt := 1; attempt <= 3 && r.stop.final.Err() == nil; attempt++ {
		rctx, cancel := context.WithTimeout(r.stop.final, r.cfg.DBTimeout)
		var n int64
		n, err = r.claimer.Release(rctx, s)
		cancel()
		if err == nil {
			r.recordReleased(int(n))
			if ce := r.log.Check(zap.DebugLevel, "released"); ce != nil {
				ce.Write(zap.Int("events", len(s.Seqs)), zap.Int64("released", n), zap.Duration("retry_in", s.RetryIn), zap.Stringer("claim_token", s.Token))
			}
			return nil
		}
		r.clock.Sleep(time.Duration(attempt) * 50 * time.Millisecond)
	}
	if err == nil {
		err = r.stop.final.Err()
	}
	if r.stop.stopping() {
		r.stop.failedRelease(len(s.Seqs), err)
		return err
	}
	r.log.Warn("release failed; the events come back when their lease ends", zap.Error(err), zap.Int("events", len(s.Seqs)))
	return err
}

func newBatchRun(b claimed, leaseFor time.Duration) *batchRun {
	return &batchRun{b: b, rows: b.Rows, deadline: b.Deadline(leaseFor), topics: map[string]string{}}
}

// nextChunk builds the next rows to publish in one call, in seq order
// (the publisher cuts them into produce requests). Rows that must wait
// (hb) or that the claim did not read are given back; rows that cannot
// become a record fail. An aggregate's events in one chunk all go to one
// topic, so to one partition, in order: an event for another topic than
// its aggregate's earlier one in the chunk starts the next chunk, which is
// only sent if this one delivered the earlier event.
func (br *batchRun) nextChunk(hb *holdback, toMessage func(*claim.Row) kafka.Message) ([]kafka.Message, []claim.Row) {
	clear(br.topics)
	var msgs []kafka.Message
	var rows []claim.Row
	for ; br.next < len(br.rows); br.next++ {
		row := &br.rows[br.next]
		if held, why := hb.heldBack(row); held {
			br.returned = append(br.returned, returned{*row, why})
			continue
		}
		if row.Unread {
			// Given back, not failed; its aggregate's later rows in this
			// batch wait behind it. Its aggregate's earlier rows in this
			// chunk go out first: the hold would keep them from being
			// marked, and they would be published twice.
			if _, inChunk := br.topics[row.AggregateID]; inChunk {
				break
			}
			br.returned = append(br.returned, returned{*row, whyUnread})
			hb.fail(row)
			continue
		}
		if row.DecodeErr != nil {
			err := fmt.Errorf("%w: %w", errUndecodableRow, row.DecodeErr)
			br.fail(hb, *row, produce.Result{Outcome: produce.DeadLetter, Err: err, Reason: "other"})
			continue
		}
		m := toMessage(row)
		if t, ok := br.topics[row.AggregateID]; ok && t != m.Topic {
			break
		}
		msgs = append(msgs, m)
		rows = append(rows, *row)
		br.topics[row.AggregateID] = m.Topic
	}
	return msgs, rows
}

func (br *batchRun) fail(hb *holdback, row claim.Row, res produce.Result) {
	br.failures = append(br.failures, failure{row: row, res: res})
	hb.fail(&row)
}

// stamp sets the publish call's times on the failures from index from on
// that have none yet.
func (br *batchRun) stamp(from int, began, ended time.Time) {
	for i := from; i < len(br.failures); i++ {
		if f := &br.failures[i]; f.began.IsZero() {
			f.began, f.ended = began, ended
		}
	}
}

// record records the outcome of a published chunk (results, one per row;
// cutOff: the shutdown deadline ended the call, so failed rows' fate is
// unknown) and returns the rows Kafka acknowledged that may be marked.
func (br *batchRun) record(hb *holdback, rows []claim.Row, results []produce.Result, cutOff bool) []claim.Row {
	var delivered []claim.Row
	for j, row := range rows {
		res := results[j]
		switch {
		case res.Outcome == produce.Held:
			br.returned = append(br.returned, returned{row, heldFailed})
		case res.Outcome == produce.Published && hb.failed[row.AggregateID]:
			// Delivered, but an earlier event of its aggregate in this
			// chunk failed: not marked, so it is published again after
			// that one.
			br.returned = append(br.returned, returned{row, heldFailed})
		case res.Outcome == produce.Unsent, res.Outcome != produce.Published && cutOff:
			// Not sent, or its outcome unknown: given back without
			// counting an attempt; whoever claims it next publishes it
			// (again).
			br.returned = append(br.returned, returned{row, whyUnsent})
		case res.Outcome != produce.Published:
			br.fail(hb, row, res)
		default:
			delivered = append(delivered, row)
		}
	}
	br.delivered += len(delivered)
	return delivered
}

// abandon gives back every row not considered yet: held rows as held, the
// others with why (the broker is down, or the relay stops).
func (br *batchRun) abandon(hb *holdback, why string) {
	for ; br.next < len(br.rows); br.next++ {
		row := &br.rows[br.next]
		if held, reason := hb.heldBack(row); held {
			br.returned = append(br.returned, returned{*row, reason})
		} else {
			br.returned = append(br.returned, returned{*row, why})
		}
	}
}

// drop removes from the rows not considered yet those whose seq is not in
// kept, and returns them: their lease passed to another claim (or ended
// with this relay's membership), which publishes them. That claim is later
// than this batch's, so the later rows of their aggregates left in this
// batch must not go out before them: they are held as after a failure; and
// the caller holds them in the batches claimed meanwhile, as after a
// give-back.
func (br *batchRun) drop(hb *holdback, kept []int64) []claim.Row {
	keep := make(map[int64]bool, len(kept))
	for _, s := range kept {
		keep[s] = true
	}
	rest := br.rows[br.next:]
	out := rest[:0:0]
	var dropped []claim.Row
	for i := range rest {
		if keep[rest[i].Seq] {
			out = append(out, rest[i])
		} else {
			hb.fail(&rest[i])
			dropped = append(dropped, rest[i])
		}
	}
	br.rows = append(br.rows[:br.next:br.next], out...)
	return dropped
}

// seqsOf returns the seqs of rows.
func seqsOf(rows []claim.Row) []int64 {
	seqs := make([]int64, len(rows))
	for i := range rows {
		seqs[i] = rows[i].Seq
	}
	return seqs
}

// allOutage reports whether the chunk's results have a failure and every
// failure is a condition of the cluster (produce.RetryOutage), none a
// problem of the record.
func allOutage(results []produce.Result) bool {
	failed := false
	for _, res := range results {
		if res.Outcome.Failed() {
			if res.Outcome != produce.RetryOutage {
				return false
			}
			failed = true
		}
	}
	return failed
}

// publishChunk publishes msgs, bounded by the batch's lease deadline, and
// returns what became of each message (the publisher cuts them into
// produce requests, sends again one at a time the records the broker
// rejected in a batch of several, and holds a key's later messages behind
// its failed one: produce.Path) and whether the relay's shutdown deadline
// cut the call off.
func (r *Relay) publishChunk(work context.Context, deadline time.Time, msgs []kafka.Message) ([]produce.Result, bool) {
	// A publish must end before the lease does, with time left to mark:
	// otherwise another claim (this relay's own, too) takes the rows over
	// and publishes them again.
	pctx, cancel := context.WithDeadline(work, deadline.Add(-r.lease.Lease/10))
	defer cancel()
	began := r.clock.Now()
	r.recordPublishing(began)
	results := r.pub.Publish(pctx, msgs)
	if len(results) != len(msgs) {
		err := fmt.Errorf("publisher answered %d results for %d messages", len(results), len(msgs))
		results = make([]produce.Result, len(msgs))
		for i := range results {
			results[i] = produce.Result{Outcome: produce.RetryAttempt, Err: err, Reason: "other"}
		}
	}
	r.recordPublishCall(began, results)
	return results, work.Err() != nil
}

// keepLease renews the batch's lease when less than half of it is left: a
// batch waits in the pipeline behind the publishes of the batches before
// it, and a lease that ended before it is published would let a claim take
// its rows over while they are published. Rows whose lease passed to
// another claim meanwhile are dropped from the batch.
func (r *Relay) keepLease(br *batchRun) {
	if br.deadline.Sub(r.clock.Now()) >= r.lease.Lease/2 {
		return
	}
	began := r.clock.Now()
	ctx, cancel := context.WithTimeout(r.stop.final, r.cfg.DBTimeout)
	kept, leased, err := r.claimer.Extend(ctx, br.b.Token, seqsOf(br.rows[br.next:]))
	cancel()
	if err != nil {
		r.log.Warn("could not renew a batch's lease; publishing within what is left of it", zap.Error(err))
		return
	}
	if len(kept) > 0 {
		br.deadline = began.Add(leased)
	}
	if dropped := br.drop(r.hb, kept); len(dropped) > 0 {
		// Like a give-back: every claim started until now may hold later
		// events of these aggregates; they wait, and the claimer lets the
		// pipeline settle before it claims again (claimGate).
		r.hb.gaveBack(dropped, r.gate.lastStarted())
		r.gate.flush()
		r.log.Warn("lease lost before publish: another claim takes these events over and publishes them", zap.Int("events", len(dropped)))
	}
}
