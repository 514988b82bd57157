package produce

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	metaAPI "github.com/segmentio/kafka-go/protocol/metadata"
	produceAPI "github.com/segmentio/kafka-go/protocol/produce"
	"github.com/segmentio/kafka-go/protocol/rawproduce"
)

// idempotentWriter is Publisher.write on the idempotent path
// (kafka.Config.Idempotent): one topic's chunk becomes one record batch
// per partition, encoded once with the producer ID, epoch and the
// partition's next sequence (Idempotent), and the batches of the
// partitions one broker leads go in one produce request. A batch whose
// outcome is unknown (a timeout, a lost connection, a leader that moved,
// NOT_ENOUGH_REPLICAS) is sent again as the same bytes, to the
// partition's leader of the moment, up to Config.MaxAttempts requests in
// all, as kafka-go's Writer retries; the broker writes it once
// (DUPLICATE_SEQUENCE_NUMBER for a copy it has). An answer about the
// producer's state (Idempotent.Produce's ErrProducerReset) gets a new
// producer ID and the batches are encoded again, as the Java producer
// bumps its epoch (KIP-360). A batch given up with its outcome unknown
// leaves its partition's sequence unknown too: the next write starts a
// new producer ID, so that a later batch can never be taken for a copy
// of that one.
type idempotentWriter struct {
	p    *Publisher
	prod *Idempotent
	// stale: the producer ID must be renewed before the next batch (a
	// batch was given up with its outcome unknown). Under p.writing.
	stale bool
	// retryLog logs the resends, rate-limited as kafka-go's retries are.
	retryLog *retryLogger
}

// write sends chunk (one topic's messages, in order) as write does on
// kafka-go's Writer: per-message failures through fail; an error when
// nothing was sent (no producer ID, no metadata). The caller holds
// p.writing.
func (w *idempotentWriter) write(ctx context.Context, chunk []kafkago.Message, fail func(int, error)) (bool, error) {
	p := w.p
	// Within the Writer's worst case (AttemptBudget), whatever the
	// InitProducerID and metadata round trips took.
	ctx, cancel := context.WithTimeout(ctx, p.AttemptBudget())
	defer cancel()
	if err := w.ready(ctx); err != nil {
		return false, err
	}
	topic := chunk[0].Topic
	leaders, err := w.leaders(ctx, topic)
	if err != nil {
		return false, err
	}
	batches, err := w.batches(topic, len(leaders), chunk)
	if err != nil {
		return false, err
	}
	failed := false
	var lastErr error
	for attempt := 0; len(batches) > 0; attempt++ {
		if attempt > 0 {
			if attempt >= p.cfg.MaxAttempts || !sleepCtx(ctx, min(time.Duration(attempt*attempt)*writeBackoffMin, writeBackoffMax)) {
				break
			}
			if p.cfg.Observer != nil {
				p.cfg.Observer.Resent(len(batches))
			}
			w.retryLog.Printf("sending %d batches of %s again as the same batches (attempt %d of %d): %v", len(batches), topic, attempt+1, p.cfg.MaxAttempts, lastErr)
			if leaders, err = w.leaders(ctx, topic); err != nil {
				lastErr = err
				continue
			}
		}
		var reset bool
		var next []*idemBatch
		for _, o := range w.send(ctx, topic, leaders, batches) {
			switch {
			case o.err == nil:
			case errors.Is(o.err, ErrProducerReset):
				reset, lastErr = true, o.err
				next = append(next, o.b)
			case ctx.Err() == nil && (IsOutage(o.err) || isRouting(o.err)):
				// Sent again as the same batch: written at most once.
				o.b.unknown = o.b.unknown || maybeWritten(o.err)
				lastErr = o.err
				next = append(next, o.b)
			default:
				// Refused, or the call ends: not sent again now.
				o.b.unknown = o.b.unknown || !IsRecordRejected(o.err)
				for _, i := range o.b.idx {
					fail(i, p.explain(topic, o.err))
				}
				failed = true
			}
		}
		batches = next
		if reset && len(batches) > 0 {
			if err := w.renew(ctx, topic, batches); err != nil {
				lastErr = err
				break
			}
		}
	}
	for _, b := range batches {
		w.stale = w.stale || b.unknown
	}
	if len(batches) == 0 {
		return failed, nil
	}
	if lastErr == nil {
		lastErr = ctx.Err()
	}
	for _, b := range batches {
		for _, i := range b.idx {
			fail(i, p.explain(topic, lastErr))
		}
	}
	return true, nil
}

// maybeWritten reports whether a failed send may have been written all
// the same: the broker did not answer (a timeout, a lost connection), or
// answered that it appended but could not replicate in time
// (REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND). Any other error
// code is the broker's refusal before appending.
func maybeWritten(err error) bool {
	var ke kafkago.Error
	if !errors.As(err, &ke) {
		return !isRouting(err)
	}
	return ke == kafkago.RequestTimedOut || ke == kafkago.NotEnoughReplicasAfterAppend
}

// isRouting reports whether err is kafka-go's, before sending, about the
// leaders of a request's partitions (its metadata moved between the
// leaders read and the request): nothing was sent.
func isRouting(err error) bool {
	var re *rawproduce.Error
	return errors.As(err, &re)
}

// ready gets a producer ID when there is none or the last one is stale.
func (w *idempotentWriter) ready(ctx context.Context) error {
	if _, epoch := w.prod.ProducerID(); epoch >= 0 && !w.stale {
		return nil
	}
	if err := w.prod.Init(ctx); err != nil {
		return err
	}
	w.stale = false
	return nil
}

// renew gets a new producer ID and encodes batches again under it.
func (w *idempotentWriter) renew(ctx context.Context, topic string, batches []*idemBatch) error {
	if err := w.prod.Init(ctx); err != nil {
		return err
	}
	w.stale = false
	for _, b := range batches {
		nb, err := w.prod.batchOf(topic, b.partition, b.msgs)
		if err != nil {
			return err
		}
		b.pendingBatch = nb
	}
	return nil
}

// idemBatch is one partition's batch of a write: the messages (and their
// indexes in the Publish call) and their encoding.
type idemBatch struct {
	*pendingBatch
	partition int
	msgs      []kafkago.Message
	idx       []int
	// unknown: a send of it failed without the broker saying it was not
	// written.
	unknown bool
}

// batches cuts chunk into one batch per partition (murmur2 of the key over
// n partitions), in order of each partition's first message.
func (w *idempotentWriter) batches(topic string, n int, chunk []kafkago.Message) ([]*idemBatch, error) {
	w.p.watch.seen(topic, n)
	byPart := map[int]*idemBatch{}
	var out []*idemBatch
	for j := range chunk {
		part := Partition(chunk[j].Key, n)
		b := byPart[part]
		if b == nil {
			b = &idemBatch{partition: part}
			byPart[part] = b
			out = append(out, b)
		}
		b.msgs = append(b.msgs, chunk[j])
		b.idx = append(b.idx, chunk[j].WriterData.(int))
	}
	for _, b := range out {
		pb, err := w.prod.batchOf(topic, b.partition, b.msgs)
		if err != nil {
			return nil, err
		}
		b.pendingBatch = pb
	}
	return out, nil
}

// leaders returns topic's partitions' leader broker IDs, indexed by
// partition, from the transport's cached metadata (which asks the
// brokers, letting them create the topic, only for a topic it does not
// know and with Config.AutoCreateTopic).
func (w *idempotentWriter) leaders(ctx context.Context, topic string) ([]int, error) {
	p := w.p
	mctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout+p.cfg.WriteTimeout)
	defer cancel()
	resp, err := p.transport.RoundTrip(mctx, w.prod.addr, &metaAPI.Request{TopicNames: []string{topic}, AllowAutoTopicCreation: p.cfg.AutoCreateTopic})
	if err != nil {
		return nil, err
	}
	res, ok := resp.(*metaAPI.Response)
	if !ok {
		return nil, fmt.Errorf("kafka: metadata: unexpected response %T", resp)
	}
	for _, t := range res.Topics {
		if t.Name != topic {
			continue
		}
		if t.ErrorCode != 0 {
			return nil, kafkago.Error(t.ErrorCode)
		}
		if len(t.Partitions) == 0 {
			return nil, kafkago.UnknownTopicOrPartition
		}
		out := make([]int, len(t.Partitions))
		for _, pt := range t.Partitions {
			if pt.PartitionIndex < 0 || int(pt.PartitionIndex) >= len(out) {
				return nil, fmt.Errorf("kafka: topic %s: partition %d of %d in metadata", topic, pt.PartitionIndex, len(out))
			}
			out[pt.PartitionIndex] = int(pt.LeaderID)
		}
		return out, nil
	}
	return nil, kafkago.UnknownTopicOrPartition
}

// idemOutcome is the answer for one batch of a send.
type idemOutcome struct {
	b   *idemBatch
	err error
}

// send sends batches, one produce request per leader, the requests at
// once, and returns each batch's outcome (nil: written, now or before).
func (w *idempotentWriter) send(ctx context.Context, topic string, leaders []int, batches []*idemBatch) []idemOutcome {
	byLeader := map[int][]*idemBatch{}
	var order []int
	for _, b := range batches {
		l := leaders[b.partition]
		if _, ok := byLeader[l]; !ok {
			order = append(order, l)
		}
		byLeader[l] = append(byLeader[l], b)
	}
	out := make([][]idemOutcome, len(order))
	var wg sync.WaitGroup
	for i, l := range order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = w.sendTo(ctx, topic, byLeader[l])
		}()
	}
	wg.Wait()
	var all []idemOutcome
	for _, o := range out {
		all = append(all, o...)
	}
	return all
}

// sendTo sends batches, whose partitions one broker leads, in one produce
// request with acks=all, bounded by Config.WriteTimeout.
func (w *idempotentWriter) sendTo(ctx context.Context, topic string, batches []*idemBatch) []idemOutcome {
	p := w.p
	req := &rawproduce.Request{Acks: int16(kafkago.RequireAll), Timeout: int32(p.cfg.WriteTimeout.Milliseconds()), Topics: []rawproduce.RequestTopic{{Topic: topic}}}
	for _, b := range batches {
		req.Topics[0].Partitions = append(req.Topics[0].Partitions, rawproduce.RequestPartition{Partition: int32(b.partition), RecordSet: protocol.RawRecordSet{Reader: b.reader()}})
	}
	actx, cancel := context.WithTimeout(ctx, p.cfg.WriteTimeout)
	defer cancel()
	resp, err := p.transport.RoundTrip(actx, w.prod.addr, req)
	out := make([]idemOutcome, len(batches))
	for i, b := range batches {
		out[i] = idemOutcome{b: b, err: err}
	}
	if err != nil {
		return out
	}
	pr, ok := resp.(*produceAPI.Response)
	if !ok {
		for i := range out {
			out[i].err = fmt.Errorf("kafka: produce: unexpected response %T", resp)
		}
		return out
	}
	answers := map[int32]*produceAPI.ResponsePartition{}
	for _, t := range pr.Topics {
		for j := range t.Partitions {
			answers[t.Partitions[j].Partition] = &t.Partitions[j]
		}
	}
	for i, b := range batches {
		a, ok := answers[int32(b.partition)]
		if !ok {
			out[i].err = fmt.Errorf("kafka: produce: no answer for partition %d", b.partition)
			continue
		}
		var err error
		if a.ErrorCode != 0 {
			err = kafkago.Error(a.ErrorCode)
			if a.ErrorMessage != "" { // as kafka-go's Writer reports it
				err = fmt.Errorf("%w: %s", err, a.ErrorMessage)
			}
		}
		out[i].err = w.prod.settle(b.pendingBatch, err)
	}
	return out
}

// sleepCtx sleeps d or until ctx ends; false when ctx ended.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
