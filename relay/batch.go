package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/pgoutbox/outbox/kafka"
	"github.com/pgoutbox/outbox/lease"
)

// Publishing one claimed batch, in three steps: build the next chunk of
// rows that may go out now (nextChunk), publish it and classify each row's
// outcome (publishChunk, record), and once the batch is done, settle what
// was not delivered: release it, with a backoff if it failed, or
// dead-letter it (settle). Delivered rows go to the marker as each chunk
// is acknowledged.

// ErrUndecodableRow marks a row that cannot become a Kafka record (see
// lease.Row.DecodeErr): it is dead-lettered at once, with the reason.
var ErrUndecodableRow = errors.New("row cannot be published")

// whyUnsent is the reason of rows given back without being tried: the
// broker was down, or the relay is shutting down.
const whyUnsent = "not sent (broker unreachable or shutting down)"

// whyUnread is why a row the claim did not read (lease.Row.Unread) is
// given back.
const whyUnread = "not read: the claim's payloads came to its byte bound (--max-batch-bytes) before it"

// failure is a row whose publish failed, with the error and, for an
// AttemptObserver, the publish call's start and end (stamp).
type failure struct {
	row          lease.Row
	err          error
	began, ended time.Time
}

// returned is a row given back unpublished without a failure of its own,
// and why: held back (a heldBack reason) or whyUnsent.
type returned struct {
	row lease.Row
	why string
}

// batchRun is one claimed batch on its way through the publisher.
type batchRun struct {
	b    claimed
	rows []lease.Row
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

func newBatchRun(b claimed, leaseFor time.Duration) *batchRun {
	return &batchRun{b: b, rows: b.Rows, deadline: b.Deadline(leaseFor), topics: map[string]string{}}
}

// nextChunk builds the next rows to publish in one call: at most maxBytes of
// records (one produce request per partition), in seq order. Rows that must
// wait (hb) or that the claim did not read are given back; rows that can
// never be published (too large, undecodable) fail. An aggregate's events in one chunk all go to one topic,
// so to one partition, in one produce request: all or nothing, in order; an
// event for another topic than its aggregate's earlier one in the chunk
// starts the next chunk, which is only sent if this one delivered the
// earlier event.
func (br *batchRun) nextChunk(hb *holdback, maxBytes int64, toMessage func(*lease.Row) kafka.Message) ([]kafka.Message, []lease.Row) {
	clear(br.topics)
	var msgs []kafka.Message
	var rows []lease.Row
	var size int64
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
			br.fail(hb, *row, fmt.Errorf("%w: %w", ErrUndecodableRow, row.DecodeErr))
			continue
		}
		m := toMessage(row)
		if t, ok := br.topics[row.AggregateID]; ok && t != m.Topic {
			break
		}
		n := kafka.MessageSize(&m)
		if n > maxBytes {
			br.fail(hb, *row, fmt.Errorf("event is %d bytes, over the publisher's limit of %d bytes (message.max.bytes): %w", n, maxBytes, kafka.ErrMessageTooLarge))
			continue
		}
		if size+n > maxBytes && len(msgs) > 0 {
			break
		}
		size += n
		msgs = append(msgs, m)
		rows = append(rows, *row)
		br.topics[row.AggregateID] = m.Topic
	}
	return msgs, rows
}

func (br *batchRun) fail(hb *holdback, row lease.Row, err error) {
	br.failures = append(br.failures, failure{row: row, err: err})
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

// record classifies the outcome of a published chunk (errs, one per row;
// cutOff: the shutdown deadline ended the call, so failed rows' fate is
// unknown) and returns the rows Kafka acknowledged that may be marked.
func (br *batchRun) record(hb *holdback, rows []lease.Row, errs []error, cutOff bool) []lease.Row {
	var delivered []lease.Row
	for j, row := range rows {
		e := errs[j]
		switch {
		case e == errHeld:
			br.returned = append(br.returned, returned{row, heldFailed})
		case e == nil && hb.failed[row.AggregateID]:
			// Delivered, but an earlier event of its aggregate in this
			// chunk failed: not marked, so it is published again after
			// that one.
			br.returned = append(br.returned, returned{row, heldFailed})
		case e != nil && cutOff:
			// Outcome unknown: given back without counting an attempt;
			// whoever claims it next publishes it (again).
			br.returned = append(br.returned, returned{row, whyUnsent})
		case e != nil:
			br.fail(hb, row, e)
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
func (br *batchRun) drop(hb *holdback, kept []int64) []lease.Row {
	keep := make(map[int64]bool, len(kept))
	for _, s := range kept {
		keep[s] = true
	}
	rest := br.rows[br.next:]
	out := rest[:0:0]
	var dropped []lease.Row
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
func seqsOf(rows []lease.Row) []int64 {
	seqs := make([]int64, len(rows))
	for i := range rows {
		seqs[i] = rows[i].Seq
	}
	return seqs
}

// errHeld marks a message not sent because an earlier event of its
// aggregate failed in the same chunk.
var errHeld = errors.New("held behind an earlier failed event of its aggregate")

// allOutage reports whether every error in errs is a condition of the
// cluster (kafka.IsOutage), none a problem of the record.
func allOutage(errs []error) bool {
	for _, e := range errs {
		if e != nil && e != errHeld && !kafka.IsOutage(e) {
			return false
		}
	}
	return true
}

// deadAtOnce reports whether a failed row can never be published as it is:
// the broker refused the record itself, or the row cannot be decoded.
func deadAtOnce(err error) bool {
	return kafka.IsRecordRejected(err) || errors.Is(err, ErrUndecodableRow)
}

// publishChunk publishes msgs (rows are their rows), bounded by the batch's
// lease deadline, and returns one error per message, the error of the call,
// and whether the relay's shutdown deadline cut it off. A record batch is
// refused as a whole (MESSAGE_TOO_LARGE is judged on the batch against the
// broker's message.max.bytes, INVALID_RECORD on any record in it), so when
// the broker rejects a batch of several records, the rejected messages are
// sent again one at a time, in order, as the Java producer splits a batch
// that was too large: only a record rejected on its own is dead-lettered,
// and once one is, the later events of its aggregate are held (errHeld).
func (r *Relay) publishChunk(work context.Context, deadline time.Time, msgs []kafka.Message, rows []lease.Row) ([]error, error, bool) {
	// A publish must end before the lease does, with time left to mark:
	// otherwise another claim (this relay's own, too) takes the rows over
	// and publishes them again.
	pctx, cancel := context.WithDeadline(work, deadline.Add(-r.lease.Lease/10))
	defer cancel()
	began := r.clock.Now()
	r.record(report{kind: reportPublishing, began: began})
	err := r.pub.Publish(pctx, msgs)
	errs := make([]error, len(msgs))
	defer func() { r.record(report{kind: reportPublishCall, began: began, errs: errs, err: err}) }()
	var perr *kafka.PublishError
	switch {
	case err == nil:
		return errs, nil, false
	case errors.As(err, &perr) && len(perr.Errs) == len(msgs):
		copy(errs, perr.Errs)
	default:
		for i := range errs {
			errs[i] = err
		}
		return errs, err, work.Err() != nil
	}
	if len(msgs) > 1 {
		r.retryRejected(pctx, msgs, rows, errs)
	}
	return errs, err, work.Err() != nil
}

// retryRejected sends the messages the broker rejected within a batch again
// one at a time (see publishChunk), updating errs.
func (r *Relay) retryRejected(ctx context.Context, msgs []kafka.Message, rows []lease.Row, errs []error) {
	failed := map[string]bool{}
	for i, e := range errs {
		if !kafka.IsRecordRejected(e) {
			continue
		}
		if failed[rows[i].AggregateID] {
			errs[i] = errHeld
			continue
		}
		errs[i] = r.pub.Publish(ctx, msgs[i:i+1])
		var one *kafka.PublishError
		if errors.As(errs[i], &one) && len(one.Errs) == 1 {
			errs[i] = one.Errs[0]
		}
		if errs[i] != nil {
			failed[rows[i].AggregateID] = true
		}
	}
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
