package produce

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/kafka"
)

// newIdempotent returns an initialized Idempotent producer on k.
func newIdempotent(t *testing.T, k *testenv.TestKafka) *Idempotent {
	t.Helper()
	addr := kafkago.TCP(k.Brokers...)
	// A transport of its own: kafka-go's default one is shared and keeps
	// the metadata of before this test's topic.
	tr := &kafkago.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	p := NewIdempotent(&kafkago.Client{Addr: addr, Timeout: 30 * time.Second, Transport: tr}, addr, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := p.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if id, epoch := p.ProducerID(); id < 0 || epoch < 0 {
		t.Fatalf("producer ID %d, epoch %d after Init", id, epoch)
	}
	return p
}

// readPartition reads partition 0 of topic from its start with franz-go (a
// decoder other than the encoder's) until want records or the deadline.
func readPartition(t *testing.T, k *testenv.TestKafka, topic string, want int) []*kgo.Record {
	t.Helper()
	cl := k.Client(t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < want && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

// A batch sent again after it was written (as after a timeout whose
// request the broker had appended) is acknowledged at its first offset and
// not written twice; the next batch follows it. Read back by franz-go, the
// records keep their keys, values (a null one included), headers and
// order, and carry the producer ID and epoch of InitProducerID.
func TestIdempotentBatchIsWrittenOnceWhenSentAgain(t *testing.T) {
	t.Parallel()
	k := testenv.Kafka(t)
	topic := k.Topic(t, 1)
	p := newIdempotent(t, k)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	msg := func(key, value string) kafka.Message {
		m := kafka.Message{Key: []byte(key), Headers: []kafka.Header{{Key: "event_id", Value: []byte(key + "/" + value)}}}
		if value != "" {
			m.Value = []byte(value)
		}
		return m
	}
	first := []kafka.Message{msg("a", "1"), msg("a", "2"), msg("b", "")}
	b1, err := p.Batch(topic, 0, first)
	if err != nil {
		t.Fatal(err)
	}
	off, err := p.Produce(ctx, b1)
	if err != nil {
		t.Fatal(err)
	}
	again, err := p.Produce(ctx, b1)
	if err != nil {
		t.Fatalf("the same batch sent again: %v", err)
	}
	if again != off && again != -1 {
		t.Fatalf("the same batch sent again was acknowledged at offset %d, want %d (its first write)", again, off)
	}
	b2, err := p.Batch(topic, 0, []kafka.Message{msg("a", "3"), msg("c", "1")})
	if err != nil {
		t.Fatal(err)
	}
	off2, err := p.Produce(ctx, b2)
	if err != nil {
		t.Fatal(err)
	}
	if off2 != off+3 {
		t.Fatalf("the next batch starts at offset %d, want %d", off2, off+3)
	}

	recs := readPartition(t, k, topic, 5)
	if end := k.EndOffsets(t, topic)[0]; end != off+5 {
		t.Fatalf("partition ends at offset %d, want %d: a batch was written twice", end, off+5)
	}
	id, epoch := p.ProducerID()
	want := []string{"a/1", "a/2", "b/", "a/3", "c/1"}
	if len(recs) != len(want) {
		t.Fatalf("read %d records, want %d", len(recs), len(want))
	}
	for i, r := range recs {
		got := fmt.Sprintf("%s/%s", r.Key, r.Value)
		if got != want[i] || len(r.Headers) != 1 || string(r.Headers[0].Value) != want[i] {
			t.Errorf("record %d: %q with headers %v, want %q", i, got, r.Headers, want[i])
		}
		if r.ProducerID != id || r.ProducerEpoch != epoch {
			t.Errorf("record %d: producer %d epoch %d, want %d, %d", i, r.ProducerID, r.ProducerEpoch, id, epoch)
		}
	}
	if recs[2].Value != nil {
		t.Errorf("record 2: value %q, want null (a tombstone)", recs[2].Value)
	}
}

// A batch whose sequence skips ahead is refused as the producer's state,
// not as a fault of its records (ErrProducerReset); after Init the
// partition's sequence starts again and the batch goes through.
func TestIdempotentSequenceGapIsAProducerReset(t *testing.T) {
	t.Parallel()
	k := testenv.Kafka(t)
	topic := k.Topic(t, 1)
	p := newIdempotent(t, k)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	msgs := []kafka.Message{{Key: []byte("a"), Value: []byte("1")}}
	b, err := p.Batch(topic, 0, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Produce(ctx, b); err != nil {
		t.Fatal(err)
	}
	id, epoch := p.ProducerID()
	gap, err := encodeBatch([]protocol.Record{record(0, msgs[0].Key, msgs[0].Value, nil)}, 0, producerSession{id: id, epoch: epoch, ok: true}, 5, false)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Produce(ctx, &pendingBatch{tp: tp{topic, 0}, seq: 5, n: 1, bytes: gap})
	if !errors.Is(err, ErrProducerReset) {
		t.Fatalf("a batch at sequence 5 after 1 record: %v, want ErrProducerReset", err)
	}
	if err := p.Init(ctx); err != nil {
		t.Fatal(err)
	}
	b, err = p.Batch(topic, 0, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Produce(ctx, b); err != nil {
		t.Fatalf("after Init: %v", err)
	}
	if end := k.EndOffsets(t, topic)[0]; end != 2 {
		t.Fatalf("partition ends at offset %d, want 2", end)
	}
}
