package produce

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"sync"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/addpartitionstotxn"
	"github.com/segmentio/kafka-go/protocol/endtxn"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox/internal/backoff"
)

// Fencing (kafka.Config.Fence): each relay produces under two
// transactional IDs of its own, used in turn, every write one Kafka
// transaction (AddPartitionsToTxn, the produce requests, EndTxn). A relay
// that takes key partitions over from a member whose membership ended
// first asks a producer ID for each of that member's transactional IDs
// (FenceMember): the coordinator bumps their epochs and aborts their open
// transactions, and every broker refuses the old epochs from then on. So a produce request of a paused relay that
// reaches a broker late is refused, and its records written before the
// fence are aborted (a read_committed consumer never sees them) and lie
// before every record of the new owner: the log keeps each aggregate's
// order. A write whose outcome is unknown (a batch given up unanswered,
// a commit unanswered) is ended the same way, by a new epoch of the
// relay's own ID, before anything else is written (Clean).

// errAborted is the error of every message of a transaction that was
// aborted or whose commit is unknown: not delivered, a condition of the
// cluster or of the relay's ownership, never the record's fault.
var errAborted = errors.New("kafka: transaction not committed")

// errCoordinator wraps every failed exchange with the cluster about the
// producer's ID or transaction (InitProducerID, AddPartitionsToTxn,
// EndTxn): a condition of the cluster (a coordinator loading, moving,
// unreachable, or busy past the call's time), never a record's fault.
var errCoordinator = errors.New("kafka: producer coordinator")

// SetTransactionalID makes p transactional under id (Config.Fence):
// Init asks id's producer ID, with timeout as the transaction timeout,
// and every batch is marked transactional. Call it before Init.
func (p *Idempotent) SetTransactionalID(id string, timeout time.Duration) {
	p.txnID, p.txnTimeout = id, timeout
}

// addPartitions adds topic's partitions to the open transaction, or
// starts one. A coordinator busy ending the previous transaction is
// asked again.
func (p *Idempotent) addPartitions(ctx context.Context, topic string, parts []int) error {
	id, epoch := p.ProducerID()
	req := &directAddPartitions{TransactionalID: p.txnID, ProducerID: id, ProducerEpoch: epoch,
		Topics: []addpartitionstotxn.RequestTopic{{Name: topic}}}
	for _, n := range parts {
		req.Topics[0].Partitions = append(req.Topics[0].Partitions, int32(n))
	}
	return p.coordinator(ctx, "add partitions to transaction", req, func(res protocol.Message) error {
		r, ok := res.(*addpartitionstotxn.Response)
		if !ok {
			return fmt.Errorf("unexpected response %T", res)
		}
		for _, t := range r.Results {
			for _, pr := range t.Results {
				if pr.ErrorCode != 0 {
					return fmt.Errorf("partition %d: %w", pr.PartitionIndex, kafkago.Error(pr.ErrorCode))
				}
			}
		}
		return nil
	})
}

// endTxn commits or aborts the open transaction.
func (p *Idempotent) endTxn(ctx context.Context, commit bool) error {
	id, epoch := p.ProducerID()
	req := &directEndTxn{TransactionalID: p.txnID, ProducerID: id, ProducerEpoch: epoch, Committed: commit}
	return p.coordinator(ctx, "end transaction", req, func(res protocol.Message) error {
		r, ok := res.(*endtxn.Response)
		if !ok {
			return fmt.Errorf("unexpected response %T", res)
		}
		if r.ErrorCode != 0 {
			return kafkago.Error(r.ErrorCode)
		}
		return nil
	})
}

// coordinator sends req to the transaction coordinator of p's
// transactional ID and reads its answer with read, until it is answered
// other than busy (coordinatorBusy) or ctx ends. The coordinator's
// address is looked up once and kept until it fails or moves: kafka-go's
// transport would look it up before every request (FindCoordinator), a
// round trip more each.
func (p *Idempotent) coordinator(ctx context.Context, what string, req protocol.Message, read func(protocol.Message) error) error {
	for attempt := 0; ; attempt++ {
		err := p.toCoordinator(ctx, req, read)
		if err == nil {
			return nil
		}
		if !coordinatorBusy(err) && !isNetworkError(err) {
			return fmt.Errorf("%w: %s %q: %w", errCoordinator, what, p.txnID, err)
		}
		if !errors.Is(err, kafkago.ConcurrentTransactions) {
			p.forgetCoordinator()
		}
		// The previous transaction's markers take a millisecond or two:
		// asked again at short, fixed intervals first (the Java producer
		// waits 20 ms), then with backoff for a coordinator that moved.
		wait := txnBackoffMin
		if attempt >= 20 {
			wait = backoff.Delay(txnBackoffMin, 100*time.Millisecond, attempt-20)
		}
		if !sleepCtx(ctx, wait) {
			return fmt.Errorf("%w: %s %q: %w (%w)", errCoordinator, what, p.txnID, ctx.Err(), err)
		}
	}
}

// toCoordinator sends req once to the coordinator and reads its answer.
func (p *Idempotent) toCoordinator(ctx context.Context, req protocol.Message, read func(protocol.Message) error) error {
	addr, err := p.coordinatorAddr(ctx)
	if err != nil {
		return err
	}
	res, err := p.client.Transport.RoundTrip(ctx, addr, req)
	if err != nil {
		return err
	}
	return read(res)
}

// coordinatorAddr returns the address of the transaction coordinator of
// p's transactional ID, looked up if not known.
func (p *Idempotent) coordinatorAddr(ctx context.Context) (net.Addr, error) {
	p.mu.Lock()
	addr := p.coord
	p.mu.Unlock()
	if addr != nil {
		return addr, nil
	}
	res, err := p.client.FindCoordinator(ctx, &kafkago.FindCoordinatorRequest{Addr: p.addr, Key: p.txnID, KeyType: kafkago.CoordinatorKeyTypeTransaction})
	if err == nil {
		err = res.Error
	}
	if err != nil {
		return nil, err
	}
	addr = kafkago.TCP(net.JoinHostPort(res.Coordinator.Host, strconv.Itoa(res.Coordinator.Port)))
	p.mu.Lock()
	p.coord = addr
	p.mu.Unlock()
	return addr, nil
}

// forgetCoordinator makes the next request look the coordinator up.
func (p *Idempotent) forgetCoordinator() {
	p.mu.Lock()
	p.coord = nil
	p.mu.Unlock()
}

// directAddPartitions and directEndTxn are kafka-go's requests, encoded
// the same, without the method that makes its transport route them
// (Transaction): sent to the address given to RoundTrip, the
// coordinator's (Idempotent.coordinator).
type (
	directAddPartitions addpartitionstotxn.Request
	directEndTxn        endtxn.Request
)

// directOverride is the kafka-go override key of the direct requests'
// types (protocol.RegisterOverride; kafka-go's own raw produce is 0).
const directOverride protocol.OverrideTypeKey = 30

func (*directAddPartitions) ApiKey() protocol.ApiKey           { return protocol.AddPartitionsToTxn }
func (*directAddPartitions) TypeKey() protocol.OverrideTypeKey { return directOverride }
func (*directEndTxn) ApiKey() protocol.ApiKey                  { return protocol.EndTxn }
func (*directEndTxn) TypeKey() protocol.OverrideTypeKey        { return directOverride }

func init() {
	protocol.RegisterOverride(&directAddPartitions{}, &addpartitionstotxn.Response{}, directOverride)
	protocol.RegisterOverride(&directEndTxn{}, &endtxn.Response{}, directOverride)
}

// writeTxn is write in one transaction: the chunk's batches are sent as
// deliver sends them and committed only if the broker answered every
// one. Otherwise the transaction ends by a new epoch (abort), which also
// makes the brokers refuse any send of it still on its way, and every
// message not refused fails with errAborted.
func (w *idempotentWriter) writeTxn(ctx context.Context, topic string, leaders []int, batches []*idemBatch, failAll func(*idemBatch, error)) error {
	parts := make([]int, 0, len(batches))
	for _, b := range batches {
		pb, err := w.prod.batchOf(topic, b.partition, b.msgs)
		if err != nil {
			return err
		}
		b.pendingBatch = pb
		parts = append(parts, b.partition)
	}
	sort.Ints(parts)
	if err := w.prod.addPartitions(ctx, topic, parts); err != nil {
		w.abort(ctx, err)
		return fmt.Errorf("%w: %w", errAborted, err)
	}
	left, lastErr := w.deliver(ctx, topic, leaders, batches)
	cause := lastErr
	// A batch refused after a send of it that may have been written
	// (stale) would be committed all the same: abort instead.
	if len(left) == 0 && !w.stale {
		if cause = w.prod.endTxn(ctx, true); cause == nil {
			for _, b := range batches {
				if b.refused != nil {
					failAll(b, b.refused)
				}
			}
			return nil
		}
	}
	if cause == nil {
		cause = errors.New("a refused batch may have been written by an earlier send")
	}
	w.abort(ctx, cause)
	for _, b := range batches {
		if b.refused != nil {
			failAll(b, b.refused)
		} else {
			failAll(b, fmt.Errorf("%w: %w", errAborted, cause))
		}
	}
	return nil
}

// abort ends the open transaction, whatever became of its sends, by a
// new epoch of the relay's transactional ID. If that fails the writer
// stays dirty (Clean false) and the next write asks again first.
func (w *idempotentWriter) abort(ctx context.Context, cause error) {
	w.prod.dirty.Store(true)
	w.stale = true
	// The call's context may be spent (the cause may be its end): the
	// abort gets one write timeout of its own.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.p.cfg.WriteTimeout)
	defer cancel()
	err := w.renew(actx, "", nil)
	w.p.log.Warn("transaction aborted", zap.String("transactional_id", w.prod.txnID), zap.NamedError("cause", cause), zap.Error(err))
}

// Clean reports whether nothing this publisher sent can still be written
// to Kafka: false from a write whose outcome is unknown until a new
// epoch of its transactional ID ended it (Config.Fence). Without Fence it
// is always true (nothing can be promised, nothing is withheld). A relay
// gives no key partition to another while its publisher is not clean.
func (p *Publisher) Clean() bool {
	if p.idem == nil {
		return true
	}
	for _, t := range p.idem.txns {
		if t.dirty.Load() {
			return false
		}
	}
	return true
}

// FenceMember makes the brokers refuse every later write of member's
// transactional ID (TransactionalID), and aborts its open transaction,
// by asking a producer ID for it: call it before publishing events of key
// partitions taken over from member. Without Config.Fence it does
// nothing. Errors are those of InitProducerID (the coordinator
// unreachable: an outage).
func (p *Publisher) FenceMember(ctx context.Context, member string) error {
	if p.idem == nil || len(p.idem.txns) == 0 {
		return nil
	}
	start := time.Now()
	// The claim waits for it: one request's time (a coordinator still
	// aborting the member's transaction answers within it).
	ctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout+p.cfg.WriteTimeout)
	defer cancel()
	ids := p.transactionalIDs(member)
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			t := p.idem.txns[0]
			_, errs[i] = initProducerID(ctx, t.client, t.addr, id, t.txnTimeout)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		p.log.Warn("could not fence a former owner: its key partitions wait", zap.String("member", member), zap.Strings("transactional_ids", ids), zap.Error(err))
		return err
	}
	p.log.Info("fenced a former owner", zap.String("member", member), zap.Strings("transactional_ids", ids), zap.Duration("took", time.Since(start)))
	return nil
}

// fenceSlots is the number of transactional IDs of a relay, used in turn
// by its writes (idempotentWriter.txns).
const fenceSlots = 2

// transactionalIDs returns member's transactional IDs with Config.Fence:
// TransactionalID(member) followed by "/0", "/1".
func (p *Publisher) transactionalIDs(member string) []string {
	ids := make([]string, fenceSlots)
	for i := range ids {
		ids[i] = p.TransactionalID(member) + "/" + strconv.Itoa(i)
	}
	return ids
}
