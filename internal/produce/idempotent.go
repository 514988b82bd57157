package produce

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"sync"
	"sync/atomic"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"

	"github.com/pgoutbox/outbox/internal/backoff"
	"github.com/pgoutbox/outbox/kafka"
)

// An idempotent producer (issue 30, first part): kafka-go's Writer sends
// every record batch with producer ID -1, so a retry after an ambiguous
// failure writes a second copy. Here each relay process gets a producer ID
// from InitProducerID, each topic-partition a sequence, and a batch keeps
// its bytes, sequence included, across retries: the broker acknowledges a
// batch it already wrote (the last five per partition) without writing it
// again (KIP-98).
//
// The Publisher sends through it with kafka.Config.Idempotent
// (idempotentWriter); with kafka.Config.Fence, under a transactional ID
// whose epoch another relay can bump (fence.go).

// producerSession is a producer ID and epoch from InitProducerID (the
// first ID a cluster hands out is 0); ok says Init got one.
type producerSession struct {
	id    int64
	epoch int16
	ok    bool
}

// transactional is the bit of a record batch's attributes that marks its
// records as part of a transaction (KIP-98).
const transactional = 0x10

// tp names a topic-partition.
type tp struct {
	topic     string
	partition int
}

// Idempotent sends record batches of one producer ID, each with the next
// sequence of its topic-partition. Safe for concurrent use; the batches of
// one topic-partition must be sent one after the other (Produce returns
// before the next may start), which is how the relay publishes.
type Idempotent struct {
	client *kafkago.Client
	addr   net.Addr
	// compression is the codec of every batch (0: none).
	compression kafkago.Compression

	// txnID, when set (SetTransactionalID), is the transactional ID Init
	// asks a producer ID for, and every batch is transactional; txnTimeout
	// is the transaction timeout Init gives the coordinator.
	txnID      string
	txnTimeout time.Duration
	// coord is the transaction coordinator's address, once looked up
	// (under mu).
	coord net.Addr
	// dirty: with a transactional ID, a write's outcome is unknown and no
	// new epoch has ended it yet (Publisher.Clean).
	dirty atomic.Bool

	mu      sync.Mutex
	session producerSession
	seqs    map[tp]int32
}

// NewIdempotent returns an Idempotent producer whose requests go through
// client to the brokers of addr (seed addresses; kafka-go routes each
// request to its partition's leader). Call Init before Produce.
func NewIdempotent(client *kafkago.Client, addr net.Addr, compression kafkago.Compression) *Idempotent {
	return &Idempotent{client: client, addr: addr, compression: compression, seqs: map[tp]int32{}}
}

// Init gets a new producer ID from the cluster and restarts every
// partition's sequence at 0. Batches sent under the previous ID that come
// back ambiguous may then be written twice: call it at start and when the
// broker no longer knows the producer (ErrProducerReset).
//
// A coordinator that is loading or moving (the first InitProducerID of a
// cluster creates its transaction state topic) is waited for, with
// backoff, until ctx ends.
func (p *Idempotent) Init(ctx context.Context) error {
	res, err := initProducerID(ctx, p.client, p.addr, p.txnID, p.txnTimeout)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.session = producerSession{id: int64(res.Producer.ProducerID), epoch: int16(res.Producer.ProducerEpoch), ok: true}
	clear(p.seqs)
	return nil
}

// initProducerID asks the cluster for a producer ID: a new one without
// txnID; with one, that ID's producer ID with its epoch bumped, which
// aborts its open transaction and makes the brokers refuse its earlier
// epoch (what fences a zombie). A coordinator that is loading or moving,
// or still ending that transaction, is waited for, with backoff, until
// ctx ends.
func initProducerID(ctx context.Context, client *kafkago.Client, addr net.Addr, txnID string, timeout time.Duration) (*kafkago.InitProducerIDResponse, error) {
	req := &kafkago.InitProducerIDRequest{Addr: addr, TransactionalID: txnID, ProducerID: -1, ProducerEpoch: -1}
	if txnID != "" {
		req.TransactionTimeoutMs = int(timeout.Milliseconds())
	}
	for attempt := 0; ; attempt++ {
		res, err := client.InitProducerID(ctx, req)
		if err == nil && res.Error != nil {
			err = res.Error
		}
		if err == nil {
			return res, nil
		}
		if errors.Is(err, kafkago.ClusterAuthorizationFailed) || errors.Is(err, kafkago.TransactionalIDAuthorizationFailed) {
			return nil, fmt.Errorf("kafka: init producer id: %w (the idempotent producer needs the IdempotentWrite permission on clusters older than Kafka 2.8 with ACLs, or WRITE on a topic on later ones, and with Config.Fence WRITE and DESCRIBE on its transactional IDs; or set Config.Idempotent false)", err)
		}
		if !coordinatorBusy(err) {
			return nil, fmt.Errorf("%w: init producer id %q: %w", errCoordinator, txnID, err)
		}
		if !sleepCtx(ctx, backoff.Delay(txnBackoffMin, time.Second, attempt)) {
			return nil, fmt.Errorf("%w: init producer id %q: %w (%w)", errCoordinator, txnID, ctx.Err(), err)
		}
	}
}

// coordinatorBusy reports whether err is a coordinator's answer to ask
// again: it is loading, moved, or still ending a transaction.
func coordinatorBusy(err error) bool {
	return errors.Is(err, kafkago.GroupLoadInProgress) || errors.Is(err, kafkago.GroupCoordinatorNotAvailable) ||
		errors.Is(err, kafkago.NotCoordinatorForGroup) || errors.Is(err, kafkago.ConcurrentTransactions)
}

// txnBackoffMin is the first wait before asking a busy coordinator again:
// ending a transaction takes it about a millisecond on a local broker.
const txnBackoffMin = time.Millisecond

// ProducerID returns the producer ID and epoch Init got (-1, -1 before).
func (p *Idempotent) ProducerID() (int64, int16) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.session.ok {
		return -1, -1
	}
	return p.session.id, p.session.epoch
}

// ErrProducerReset wraps the broker's answer that this producer's
// sequence or ID is no longer valid (OUT_OF_ORDER_SEQUENCE_NUMBER,
// UNKNOWN_PRODUCER_ID, INVALID_PRODUCER_EPOCH; with a transactional ID
// also PRODUCER_FENCED, INVALID_TXN_STATE, INVALID_PRODUCER_ID_MAPPING):
// not a fault of the batch's
// records; Init again and resend.
var ErrProducerReset = errors.New("idempotent producer state lost")

// pendingBatch is one encoded batch of a topic-partition and the sequence
// it starts at; resent as is after an ambiguous failure.
type pendingBatch struct {
	tp    tp
	seq   int32
	n     int
	bytes []byte
}

// Batch encodes msgs (one topic-partition's, in order; their Topic is
// not read) as the next batch of tp's sequence. The sequence advances only
// when Produce of this batch succeeds; a second Batch for the same tp
// before that starts at the same sequence.
func (p *Idempotent) Batch(topic string, partition int, msgs []kafka.Message) (*pendingBatch, error) {
	km := make([]kafkago.Message, len(msgs))
	for i, m := range msgs {
		km[i] = kafkago.Message{Key: m.Key, Value: m.Value}
		for _, h := range m.Headers {
			km[i].Headers = append(km[i].Headers, kafkago.Header{Key: h.Key, Value: h.Value})
		}
	}
	return p.batchOf(topic, partition, km)
}

// batchOf is Batch for kafka-go messages (the Publisher's).
func (p *Idempotent) batchOf(topic string, partition int, msgs []kafkago.Message) (*pendingBatch, error) {
	recs := make([]protocol.Record, len(msgs))
	for i, m := range msgs {
		hs := make([]protocol.Header, len(m.Headers))
		for j, h := range m.Headers {
			hs[j] = protocol.Header{Key: h.Key, Value: h.Value}
		}
		recs[i] = record(i, m.Key, m.Value, hs)
	}
	return p.encode(topic, partition, recs)
}

// record is the i-th record of a batch; a nil key or value stays null.
func record(i int, key, value []byte, hs []protocol.Header) protocol.Record {
	r := protocol.Record{Offset: int64(i), Headers: hs}
	if key != nil {
		r.Key = protocol.NewBytes(key)
	}
	if value != nil {
		r.Value = protocol.NewBytes(value)
	}
	return r
}

// encode encodes recs as the next batch of topic-partition's sequence.
func (p *Idempotent) encode(topic string, partition int, recs []protocol.Record) (*pendingBatch, error) {
	p.mu.Lock()
	s, seq := p.session, p.seqs[tp{topic, partition}]
	p.mu.Unlock()
	if !s.ok {
		return nil, errors.New("kafka: idempotent producer not initialized")
	}
	b, err := encodeBatch(recs, p.compression, s, seq, p.txnID != "")
	if err != nil {
		return nil, err
	}
	return &pendingBatch{tp: tp{topic, partition}, seq: seq, n: len(recs), bytes: b}, nil
}

// reader reads b's record set from its start, for one send.
func (b *pendingBatch) reader() *bytes.Reader { return bytes.NewReader(b.bytes) }

// Produce sends b with acks=all and returns the offset of its first
// record. A batch the broker had already written is acknowledged again
// with its offset, not written twice. On success the partition's sequence
// moves past b. An error of the broker about this producer's state wraps
// ErrProducerReset; any other error is returned as is (the caller may
// send b again, as the same batch).
func (p *Idempotent) Produce(ctx context.Context, b *pendingBatch) (int64, error) {
	res, err := p.client.RawProduce(ctx, &kafkago.RawProduceRequest{
		Addr: p.addr, Topic: b.tp.topic, Partition: b.tp.partition, RequiredAcks: kafkago.RequireAll,
		RawRecords: protocol.RawRecordSet{Reader: b.reader()},
	})
	if err == nil && res.Error != nil {
		err = res.Error
	}
	if err = p.settle(b, err); err != nil {
		return 0, err
	}
	if res == nil {
		return -1, nil
	}
	return res.BaseOffset, nil
}

// settle turns the broker's answer for b (err: nil, or its error) into
// b's outcome: nil when b is written, now or by an earlier send
// (DUPLICATE_SEQUENCE_NUMBER), which moves the partition's sequence past
// b; an error wrapping ErrProducerReset for an answer about the
// producer's state; else err.
func (p *Idempotent) settle(b *pendingBatch, err error) error {
	switch {
	case err == nil, errors.Is(err, kafkago.DuplicateSequenceNumber):
		// Written, now or by an earlier send of this batch.
	case errors.Is(err, kafkago.OutOfOrderSequenceNumber), errors.Is(err, kafkago.UnknownProducerId), errors.Is(err, kafkago.InvalidProducerEpoch),
		errors.Is(err, kafkago.ProducerFenced), errors.Is(err, kafkago.InvalidTransactionState), errors.Is(err, kafkago.InvalidProducerIDMapping):
		return fmt.Errorf("%w: %w", ErrProducerReset, err)
	default:
		return err
	}
	p.mu.Lock()
	if p.seqs[b.tp] == b.seq {
		p.seqs[b.tp] = b.seq + int32(b.n)
	}
	p.mu.Unlock()
	return nil
}

// Offsets of the fields of a record batch (v2) that kafka-go's encoder
// writes as -1 (protocol/record_v2.go), counted from the batch's start,
// which follows the record set's 4-byte size.
const (
	batchCRC           = 17
	batchAttributes    = 21
	batchProducerID    = 43
	batchProducerEpoch = 51
	batchBaseSequence  = 53
	batchHeaderLen     = 61
	recordSetSizeLen   = 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// encodeBatch encodes recs as one record batch (v2) with kafka-go's
// encoder, then sets the producer ID, epoch and base sequence it leaves at
// -1 and recomputes the batch's CRC-32C (which covers the attributes to
// the end); txn marks the batch transactional. The result is the record set as a produce request carries it
// (its size, then the batch).
func encodeBatch(recs []protocol.Record, compression kafkago.Compression, s producerSession, seq int32, txn bool) ([]byte, error) {
	if len(recs) == 0 {
		return nil, errors.New("kafka: empty batch")
	}
	rs := protocol.RecordSet{Version: 2, Attributes: protocol.Attributes(compression) & 7, Records: protocol.NewRecordReader(recs...)}
	var buf bytes.Buffer
	if _, err := rs.WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("kafka: encode record batch: %w", err)
	}
	out := buf.Bytes()
	if len(out) < recordSetSizeLen+batchHeaderLen || out[recordSetSizeLen+16] != 2 {
		return nil, fmt.Errorf("kafka: encode record batch: not a v2 batch (%d bytes)", len(out))
	}
	batch := out[recordSetSizeLen:]
	if txn {
		batch[batchAttributes+1] |= transactional
	}
	binary.BigEndian.PutUint64(batch[batchProducerID:], uint64(s.id))
	binary.BigEndian.PutUint16(batch[batchProducerEpoch:], uint16(s.epoch))
	binary.BigEndian.PutUint32(batch[batchBaseSequence:], uint32(seq))
	binary.BigEndian.PutUint32(batch[batchCRC:], crc32.Checksum(batch[batchAttributes:], castagnoli))
	return out, nil
}
