package produce

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/kafka"
)

// answerDropper wraps the Publisher's broker connections: while drops is
// above 0, the answer to a produce request is read from the broker (which
// has appended the records by then: acks=all) and then the connection is
// closed instead of handing the answer over, as when a connection dies
// after the broker wrote a batch and before its answer arrived.
type answerDropper struct {
	drops   atomic.Int32
	dropped atomic.Int32
}

func (d *answerDropper) wrap(c net.Conn) net.Conn { return &dropConn{Conn: c, d: d} }

type dropConn struct {
	net.Conn
	d       *answerDropper
	produce atomic.Bool // the last request written was a produce request
}

func (c *dropConn) Write(b []byte) (int, error) {
	if len(b) >= 6 {
		c.produce.Store(binary.BigEndian.Uint16(b[4:6]) == 0) // API key 0: Produce
	}
	return c.Conn.Write(b)
}

func (c *dropConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && c.produce.Load() && c.d.drops.Add(-1) >= 0 {
		c.d.dropped.Add(1)
		_ = c.Conn.Close()
		return 0, net.ErrClosed
	}
	return n, err
}

// A produce request whose answer is lost after the broker appended it (its
// connection dies) is sent again. The idempotent publisher sends the same
// batches, which the broker acknowledges without writing them again: 60
// events over 3 partitions, each of the first two requests' answers lost,
// end as 60 records, each key's in order, with the producer ID that
// InitProducerID gave, in one Publish call. Without it, kafka-go's Writer
// gives the lost answers up and the events published again are written
// twice: the defect the idempotent path removes.
func TestIdempotentPublishWritesOnceWhenTheAnswerIsLost(t *testing.T) {
	t.Parallel()
	k := testenv.Kafka(t)
	for _, idempotent := range []bool{true, false} {
		t.Run(fmt.Sprint("idempotent=", idempotent), func(t *testing.T) {
			t.Parallel()
			topic := k.Topic(t, 3)
			p, ctx := newIdempotentPublisher(t, kafka.Config{Brokers: k.Brokers, Topic: topic, Idempotent: idempotent})
			d := &answerDropper{}
			p.dialer.wrap = d.wrap
			warm := []kafka.Message{{Key: []byte("warm"), Value: []byte("0")}}
			if res := p.Publish(ctx, warm); res[0].Outcome != Published {
				t.Fatalf("first publish: %v", res[0].Err)
			}
			const n = 60
			msgs := make([]kafka.Message, n)
			for i := range msgs {
				msgs[i] = kafka.Message{Key: fmt.Appendf(nil, "agg-%d", i%12), Value: fmt.Appendf(nil, "%d", i)}
			}
			// As the relay does, what was not published is published again
			// (kafka-go's Writer gives a lost answer up as an outage).
			d.drops.Store(2)
			calls := 0
			for todo := msgs; len(todo) > 0; calls++ {
				if calls == 5 {
					t.Fatalf("%d messages still not published after %d calls", len(todo), calls)
				}
				var again []kafka.Message
				for i, r := range p.Publish(ctx, todo) {
					if r.Outcome != Published {
						again = append(again, todo[i])
					}
				}
				todo = again
			}
			if idempotent && calls != 1 {
				t.Errorf("the idempotent publisher needed %d calls, want 1: it sends the batches again itself", calls)
			}
			if d.dropped.Load() == 0 {
				t.Fatal("no answer was dropped: the test proves nothing")
			}
			ends := k.EndOffsets(t, topic)
			var total int64
			for _, e := range ends {
				total += e
			}
			recs := k.Consume(t, topic, int(total), 30*time.Second)
			copies := int(total) - n - 1
			t.Logf("%d answers dropped, %d records for %d events (%d copies)", d.dropped.Load(), total, n+1, copies)
			if !idempotent {
				if copies == 0 {
					t.Fatal("kafka-go's Writer wrote no copy after lost answers: the fault did not hit an appended request")
				}
				return
			}
			if copies != 0 {
				t.Fatalf("%d copies written by the idempotent publisher", copies)
			}
			last := map[string]int{}
			for _, r := range recs {
				var v int
				fmt.Sscan(string(r.Value), &v)
				if prev, ok := last[string(r.Key)]; ok && v <= prev && string(r.Key) != "warm" {
					t.Fatalf("key %s: %d after %d", r.Key, v, prev)
				}
				last[string(r.Key)] = v
			}
			id, epoch := p.idem.prod.ProducerID()
			cl := k.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			seen := 0
			for seen < int(total) && ctx.Err() == nil {
				cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
					seen++
					if r.ProducerID != id || r.ProducerEpoch != epoch {
						t.Errorf("record %s/%d: producer %d epoch %d, want %d/%d", r.Key, r.Offset, r.ProducerID, r.ProducerEpoch, id, epoch)
					}
				})
			}
		})
	}
}

// The broker's answers about the producer's state, injected on kfake, are
// no fault of the records: OUT_OF_ORDER_SEQUENCE_NUMBER,
// UNKNOWN_PRODUCER_ID and INVALID_PRODUCER_EPOCH get a new producer ID
// and the same records go out under it, in the same Publish call: every
// event published, once.
func TestIdempotentPublishRenewsTheProducerOnAStateError(t *testing.T) {
	t.Parallel()
	for _, code := range []kafkago.Error{kafkago.OutOfOrderSequenceNumber, kafkago.UnknownProducerId, kafkago.InvalidProducerEpoch} {
		t.Run(code.Title(), func(t *testing.T) {
			t.Parallel()
			b, topic := newFakeBroker(t, 3)
			p, ctx := newIdempotentPublisher(t, kafka.Config{Brokers: b.addrs, Topic: topic, Idempotent: true})
			publishAll(ctx, t, p, testMessages(30, []string{"a", "b", "c", "d", "e", "f"}))
			id, epoch := p.idem.prod.ProducerID()
			hits := failProduceN(b.cluster, topic, 0, int16(code), 1)
			publishAll(ctx, t, p, testMessages(30, []string{"a", "b", "c", "d", "e", "f"}))
			if hits.Load() != 1 {
				t.Fatalf("%d answers injected, want 1", hits.Load())
			}
			if id2, epoch2 := p.idem.prod.ProducerID(); id2 == id && epoch2 == epoch {
				t.Fatalf("producer %d epoch %d kept after %s", id, epoch, code.Title())
			}
			if total := sumOffsets(t, b, topic); total != 60 {
				t.Fatalf("%d records for 60 events", total)
			}
		})
	}
}

// A batch the broker refused without writing it (MESSAGE_TOO_LARGE for
// the whole request, injected once) leaves its partition's sequence
// where it was: the messages, sent again one at a time as Path does, are
// written under the same producer ID, with no producer-state error.
func TestIdempotentPublishReusesTheSequenceOfARefusedBatch(t *testing.T) {
	t.Parallel()
	b, topic := newFakeBroker(t, 1)
	p, ctx := newIdempotentPublisher(t, kafka.Config{Brokers: b.addrs, Topic: topic, Idempotent: true})
	publishAll(ctx, t, p, testMessages(5, []string{"a", "b"}))
	id, epoch := p.idem.prod.ProducerID()
	failProduceN(b.cluster, topic, 0, int16(kafkago.MessageSizeTooLarge), 1)
	publishAll(ctx, t, p, testMessages(5, []string{"a", "b"}))
	if id2, epoch2 := p.idem.prod.ProducerID(); id2 != id || epoch2 != epoch {
		t.Fatalf("producer %d/%d became %d/%d: the refused batch's sequence was taken as used", id, epoch, id2, epoch2)
	}
	if total := sumOffsets(t, b, topic); total != 10 {
		t.Fatalf("%d records for 10 events", total)
	}
}

// publishAll publishes msgs and fails the test unless every one was.
func publishAll(ctx context.Context, t *testing.T, p *Publisher, msgs []kafka.Message) {
	t.Helper()
	for i, r := range p.Publish(ctx, msgs) {
		if r.Outcome != Published {
			t.Fatalf("message %d: %s: %v", i, r.Outcome, r.Err)
		}
	}
}

// sumOffsets is the number of records in topic's partitions.
func sumOffsets(t *testing.T, b *broker, topic string) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	return total
}

// Batches of every codec go through the idempotent path, and an
// independent consumer (franz-go) reads the records back as sent.
func TestIdempotentPublishCompresses(t *testing.T) {
	t.Parallel()
	k := testenv.Kafka(t)
	for _, c := range []kafka.Compression{kafka.CompressionGzip, kafka.CompressionSnappy, kafka.CompressionLz4, kafka.CompressionZstd} {
		t.Run(string(c), func(t *testing.T) {
			t.Parallel()
			topic := k.Topic(t, 2)
			p, ctx := newIdempotentPublisher(t, kafka.Config{Brokers: k.Brokers, Topic: topic, Idempotent: true, Compression: c})
			msgs := testMessages(40, []string{"a", "b", "c"})
			publishAll(ctx, t, p, msgs)
			want := map[string]bool{}
			for _, m := range msgs {
				want[string(m.Key)+"="+string(m.Value)] = true
			}
			for _, r := range k.Consume(t, topic, len(msgs), 30*time.Second) {
				if !want[string(r.Key)+"="+string(r.Value)] {
					t.Fatalf("record %s=%s was not sent", r.Key, r.Value)
				}
				delete(want, string(r.Key)+"="+string(r.Value))
			}
			if len(want) != 0 {
				t.Fatalf("%d records missing", len(want))
			}
		})
	}
}

// A batch whose every answer was lost (the call gives it up: an outage)
// stays pending: the next call to its partition, here other events of
// it, sends it again as the same batch first; when the relay publishes
// the given-up events again, in a later call, they are not written a
// second time, and later events of their keys follow them, in order. Without
// this, the next batch would reuse the unanswered batch's sequence, and
// a broker that had written that batch would take the new one, of the
// same length, for its copy and drop it: lost events.
func TestIdempotentPublishResolvesAnUnansweredBatchInTheNextCall(t *testing.T) {
	t.Parallel()
	k := testenv.Kafka(t)
	topic := k.Topic(t, 1)
	p, ctx := newIdempotentPublisher(t, kafka.Config{Brokers: k.Brokers, Topic: topic, Idempotent: true, MaxAttempts: 2})
	d := &answerDropper{}
	p.dialer.wrap = d.wrap
	publishAll(ctx, t, p, []kafka.Message{{Key: []byte("warm"), Value: []byte("0")}})
	first := testMessages(10, []string{"a", "b"})
	d.drops.Store(2) // both attempts' answers
	for i, r := range p.Publish(ctx, first) {
		if r.Outcome != RetryOutage {
			t.Fatalf("message %d with every answer lost: %s (%v), want retry_outage", i, r.Outcome, r.Err)
		}
	}
	if d.dropped.Load() != 2 {
		t.Fatalf("%d answers dropped, want 2", d.dropped.Load())
	}
	// Other events of the partition come first (the relay gave the first
	// ones back with a backoff); then the relay publishes the first ones
	// again, with later ones of their keys.
	other := testMessages(5, []string{"c"})
	publishAll(ctx, t, p, other)
	later := testMessages(14, []string{"a", "b"})[10:]
	publishAll(ctx, t, p, append(append([]kafka.Message{}, first...), later...))
	want := append(append(append([]kafka.Message{}, first...), other...), later...)
	if end := k.EndOffsets(t, topic)[0]; end != 1+int64(len(want)) {
		t.Fatalf("partition ends at offset %d, want %d: %d copies", end, 1+len(want), end-1-int64(len(want)))
	}
	recs := k.Consume(t, topic, 1+len(want), 30*time.Second)
	for i, r := range recs[1:] {
		if w := want[i]; string(r.Key) != string(w.Key) || string(r.Value) != string(w.Value) {
			t.Fatalf("record %d: %s=%s, want %s=%s", i+1, r.Key, r.Value, w.Key, w.Value)
		}
	}
}

// newIdempotentPublisher returns a Publisher of cfg, closed when the
// test ends, and a context for its calls.
func newIdempotentPublisher(t *testing.T, cfg kafka.Config) (*Publisher, context.Context) {
	t.Helper()
	p, err := NewPublisher(cfg, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return p, ctx
}
