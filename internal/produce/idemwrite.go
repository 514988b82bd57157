package produce

import (
	"bytes"
	"cmp"
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
	"go.uber.org/zap"
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
// (DUPLICATE_SEQUENCE_NUMBER, or its first offset again, for a copy it
// has). An answer about the producer's state (Idempotent.Produce's
// ErrProducerReset) gets a new producer ID and the batches are encoded
// again, as the Java producer bumps its epoch (KIP-360).
//
// A batch given up with its outcome unknown stays pending: its
// partition's sequence does not move, and the next write to that
// partition first sends it again, as the same batch, until the broker
// answers. Written, its messages count as published in that write (the
// relay publishes the same events again); refused, the partition goes on
// from its sequence. So a later batch never reuses a sequence that an
// unanswered batch may hold (the broker would take it for that batch's
// copy and drop it), and a retry across calls writes no copy.
type idempotentWriter struct {
	p    *Publisher
	prod *Idempotent
	// pending are the batches given up with their outcome unknown, by
	// partition, of the current producer ID; stale: a batch that may have
	// been written was then refused, so its partition's sequence is
	// unknown and the producer ID must be renewed. Under p.writing.
	pending map[tp]*idemBatch
	stale   bool
	// written are the messages of pending batches the broker answered as
	// written, by partition, until they are published again (dropWritten).
	written map[tp][]writtenMsg
	// retryLog logs the resends, rate-limited as kafka-go's retries are.
	retryLog *retryLogger
	// txns are the transactional producers with Config.Fence (SetMember),
	// used in turn: prod is txns[turn] during a write. Nil without Fence.
	txns []*Idempotent
	turn int
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
	if len(w.txns) > 0 {
		// In turn, so that this write need not wait for the markers of the
		// previous one's transaction (CONCURRENT_TRANSACTIONS).
		w.prod, w.turn = w.txns[w.turn], (w.turn+1)%len(w.txns)
	}
	if err := w.ready(ctx); err != nil {
		return false, err
	}
	topic := chunk[0].Topic
	leaders, err := w.leaders(ctx, topic)
	if err != nil {
		return false, err
	}
	batches := w.cut(topic, len(leaders), chunk)
	failed := false
	failAll := func(b *idemBatch, err error) {
		for _, i := range b.idx {
			fail(i, p.explain(topic, err))
		}
		failed = true
	}
	if w.prod.txnID != "" {
		return failed, w.writeTxn(ctx, topic, leaders, batches, failAll)
	}
	// First the batches left unanswered by earlier writes to these
	// partitions.
	if err := w.resolvePending(ctx, topic, leaders, batches, failAll); err != nil {
		return failed, err
	}
	var todo []*idemBatch
	for _, b := range batches {
		if len(b.msgs) > 0 && len(w.written[tp{topic, b.partition}]) > 0 {
			w.dropWritten(b)
		}
		if len(b.msgs) == 0 {
			continue
		}
		pb, err := w.prod.batchOf(topic, b.partition, b.msgs)
		if err != nil {
			return failed, err
		}
		b.pendingBatch = pb
		todo = append(todo, b)
	}
	left, lastErr := w.deliver(ctx, topic, leaders, todo)
	for _, b := range todo {
		switch {
		case left[b]:
			if b.unknown {
				w.pending[b.tp] = b
				if ce := p.log.Check(zap.DebugLevel, "idempotent producer: batch unanswered, pending"); ce != nil {
					ce.Write(zap.Int("partition", b.partition), zap.Int32("sequence", b.seq), zap.Int("records", b.n), zap.Error(b.err))
				}
			}
			failAll(b, cmp.Or(b.err, lastErr))
		case b.refused != nil:
			failAll(b, b.refused)
		}
	}
	return failed, nil
}

// resolvePending sends again the pending batches of batches' partitions.
// A partition whose pending batch is still unanswered fails its batch
// (failAll) and sends nothing; one whose pending batch the broker has
// moves its messages to written. A producer ID made stale is renewed.
func (w *idempotentWriter) resolvePending(ctx context.Context, topic string, leaders []int, batches []*idemBatch, failAll func(*idemBatch, error)) error {
	p := w.p
	var old []*idemBatch
	of := map[*idemBatch]*idemBatch{} // a chunk batch's pending batch
	for _, b := range batches {
		if pb := w.pending[tp{topic, b.partition}]; pb != nil {
			old = append(old, pb)
			of[b] = pb
		}
	}
	if len(old) == 0 {
		return nil
	}
	left, lastErr := w.deliver(ctx, topic, leaders, old)
	for _, b := range batches {
		pb := of[b]
		switch {
		case pb == nil:
		case left[pb]:
			// Still pending, also if a new producer ID cleared the
			// pending batches meanwhile (deliver's renew encoded it anew):
			// its partition's sequence stays unknown until it is answered.
			w.pending[pb.tp] = pb
			failAll(b, fmt.Errorf("an earlier batch of partition %d is still unanswered: %w", b.partition, lastErr))
			b.msgs = nil
		default:
			delete(w.pending, pb.tp)
			if pb.written {
				now := time.Now()
				for _, m := range pb.msgs {
					w.written[pb.tp] = append(w.written[pb.tp], writtenMsg{msg: m, at: now})
				}
			}
			n := len(b.msgs)
			w.dropWritten(b)
			if ce := p.log.Check(zap.DebugLevel, "idempotent producer: pending batch answered"); ce != nil {
				ce.Write(zap.Int("partition", b.partition), zap.Int32("sequence", pb.seq), zap.Int("records", pb.n),
					zap.Bool("written", pb.written), zap.Int("published_again", n-len(b.msgs)), zap.Int("batch", n))
			}
		}
	}
	return w.ready(ctx)
}

// deliver sends batches until each is written or refused, or attempts
// (Config.MaxAttempts) or ctx end; it returns those left, with the last
// error seen. A batch's written or refused field says what became of
// it; unknown, whether one of its sends may have been written.
func (w *idempotentWriter) deliver(ctx context.Context, topic string, leaders []int, batches []*idemBatch) (map[*idemBatch]bool, error) {
	p := w.p
	var lastErr error
	var given []*idemBatch
	for attempt := 0; len(batches) > 0; attempt++ {
		if attempt > 0 {
			if attempt >= p.cfg.MaxAttempts || !sleepCtx(ctx, min(time.Duration(attempt*attempt)*writeBackoffMin, writeBackoffMax)) {
				break
			}
			if p.cfg.Observer != nil {
				p.cfg.Observer.Resent(len(batches))
			}
			w.retryLog.Printf("sending %d batches of %s again as the same batches (attempt %d of %d): %v", len(batches), topic, attempt+1, p.cfg.MaxAttempts, lastErr)
			var err error
			if leaders, err = w.leaders(ctx, topic); err != nil {
				lastErr = err
				continue
			}
		}
		var reset bool
		var next []*idemBatch
		for _, o := range w.send(ctx, topic, leaders, batches) {
			o.b.err = o.err
			switch {
			case o.err == nil:
				o.b.written = true
			case errors.Is(o.err, ErrProducerReset) && w.prod.txnID != "":
				// The transaction is lost: writeTxn aborts it.
				o.b.unknown, lastErr = true, o.err
				given = append(given, o.b)
			case errors.Is(o.err, ErrProducerReset):
				reset, lastErr = true, o.err
				next = append(next, o.b)
			case ctx.Err() == nil && (IsOutage(o.err) || isRouting(o.err)):
				// Sent again as the same batch: written at most once.
				o.b.unknown = o.b.unknown || maybeWritten(o.err)
				lastErr = o.err
				next = append(next, o.b)
			case IsRecordRejected(o.err):
				// Not written now; if an earlier send may have been, the
				// partition's sequence is unknown: a new producer ID
				// before the next batch.
				o.b.refused = o.err
				w.stale = w.stale || o.b.unknown
			default:
				// The call ends (ctx), or an error no rule knows: given up.
				o.b.unknown = true
				lastErr = o.err
				given = append(given, o.b)
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
	if lastErr == nil {
		lastErr = ctx.Err()
	}
	batches = append(batches, given...)
	left := make(map[*idemBatch]bool, len(batches))
	for _, b := range batches {
		left[b] = true
	}
	return left, lastErr
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

// dropWritten removes from b the messages that a pending batch of its
// partition wrote (written), which count as published in this write,
// and forgets those waiting longer than writtenKeep.
func (w *idempotentWriter) dropWritten(b *idemBatch) {
	k := tp{b.topic, b.partition}
	rest := b.drop(w.written[k])
	now := time.Now()
	kept := rest[:0]
	for _, m := range rest {
		if now.Sub(m.at) < writtenKeep {
			kept = append(kept, m)
		}
	}
	if len(kept) == 0 {
		delete(w.written, k)
		return
	}
	w.written[k] = kept
}

// ready gets a producer ID when there is none or it is stale.
func (w *idempotentWriter) ready(ctx context.Context) error {
	if _, epoch := w.prod.ProducerID(); epoch >= 0 && !w.stale && !w.prod.dirty.Load() {
		return nil
	}
	return w.renew(ctx, "", nil)
}

// renew gets a new producer ID and encodes batches again under it. The
// batches pending under the old one can no longer be told from new ones:
// they are dropped (their events, published again, may be copies).
func (w *idempotentWriter) renew(ctx context.Context, topic string, batches []*idemBatch) error {
	if err := w.prod.Init(ctx); err != nil {
		return err
	}
	w.prod.dirty.Store(false)
	id, epoch := w.prod.ProducerID()
	w.p.log.Info("idempotent producer: new producer ID", zap.Int64("producer_id", id), zap.Int16("epoch", epoch),
		zap.Int("pending_dropped", len(w.pending)), zap.Bool("stale", w.stale))
	w.stale = false
	clear(w.pending)
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
	topic     string
	partition int
	msgs      []kafkago.Message
	idx       []int
	// unknown: a send of it failed without the broker saying it was not
	// written. written: the broker has it; refused: the broker refused it
	// without writing it (this time). err is its last send's error.
	unknown, written bool
	refused, err     error
}

// drop removes from b the first message equal to each of sent (the
// same key, value and headers): messages the broker has, published
// again. It returns those of sent that b did not hold.
func (b *idemBatch) drop(sent []writtenMsg) []writtenMsg {
	var rest []writtenMsg
	for _, m := range sent {
		found := false
		for j := range b.msgs {
			if sameMessage(&b.msgs[j], &m.msg) {
				b.msgs = append(b.msgs[:j], b.msgs[j+1:]...)
				b.idx = append(b.idx[:j], b.idx[j+1:]...)
				found = true
				break
			}
		}
		if !found {
			rest = append(rest, m)
		}
	}
	return rest
}

// writtenMsg is a message of a pending batch the broker answered as
// written, not yet published again (idempotentWriter.written), and when
// it was answered.
type writtenMsg struct {
	msg kafkago.Message
	at  time.Time
}

// writtenKeep is how long a written pending batch's message waits to be
// published again (the relay gives the events back with a backoff, and
// publishes them again at their next claim) before it is forgotten.
const writtenKeep = 10 * time.Minute

// sameMessage reports whether a and b have the same key, value and
// headers.
func sameMessage(a, b *kafkago.Message) bool {
	if !bytes.Equal(a.Key, b.Key) || !bytes.Equal(a.Value, b.Value) || len(a.Headers) != len(b.Headers) {
		return false
	}
	for i := range a.Headers {
		if a.Headers[i].Key != b.Headers[i].Key || !bytes.Equal(a.Headers[i].Value, b.Headers[i].Value) {
			return false
		}
	}
	return true
}

// cut cuts chunk into one batch per partition (murmur2 of the key over n
// partitions), in order of each partition's first message, not encoded.
func (w *idempotentWriter) cut(topic string, n int, chunk []kafkago.Message) []*idemBatch {
	w.p.watch.seen(topic, n)
	byPart := map[int]*idemBatch{}
	var out []*idemBatch
	for j := range chunk {
		part := Partition(chunk[j].Key, n)
		b := byPart[part]
		if b == nil {
			b = &idemBatch{topic: topic, partition: part}
			byPart[part] = b
			out = append(out, b)
		}
		b.msgs = append(b.msgs, chunk[j])
		b.idx = append(b.idx, chunk[j].WriterData.(int))
	}
	return out
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
	req := &rawproduce.Request{TransactionalID: w.prod.txnID, Acks: int16(kafkago.RequireAll), Timeout: int32(p.cfg.WriteTimeout.Milliseconds()), Topics: []rawproduce.RequestTopic{{Topic: topic}}}
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
