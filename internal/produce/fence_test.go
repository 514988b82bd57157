package produce

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/outbox/internal/checker"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/kafka"
)

// produceHolder wraps a Publisher's broker connections: while held, a
// produce request's write waits (the request is on its way, not at the
// broker) until release, as a request of a relay paused mid-publish, or
// delayed by the network, arrives late.
type produceHolder struct {
	mu      sync.Mutex
	holding bool
	held    chan struct{} // closed when a produce request is held
	release chan struct{}
}

func newProduceHolder() *produceHolder {
	return &produceHolder{held: make(chan struct{}), release: make(chan struct{})}
}

func (h *produceHolder) wrap(c net.Conn) net.Conn { return &holdConn{Conn: c, h: h} }

type holdConn struct {
	net.Conn
	h *produceHolder
}

func (c *holdConn) Write(b []byte) (int, error) {
	if len(b) >= 6 && binary.BigEndian.Uint16(b[4:6]) == 0 { // API key 0: Produce
		c.h.mu.Lock()
		hold := c.h.holding
		if hold {
			c.h.holding = false
			close(c.h.held)
		}
		c.h.mu.Unlock()
		if hold {
			<-c.h.release
		}
	}
	return c.Conn.Write(b)
}

// fencedPublisher returns a Publisher with Config.Fence for member.
func fencedPublisher(t *testing.T, brokers []string, topic, member string) (*Publisher, context.Context) {
	t.Helper()
	p, ctx := newIdempotentPublisher(t, kafka.Config{Brokers: brokers, Topic: topic, Idempotent: true, Fence: true,
		TransactionalIDPrefix: "fence-test/" + topic + "/", WriteTimeout: 20 * time.Second})
	p.SetMember(member)
	return p, ctx
}

// numbered returns n messages over keys, each value its number from
// first on: an aggregate's later events have higher numbers.
func numbered(first, n int, keys []string) []kafka.Message {
	msgs := make([]kafka.Message, n)
	for i := range msgs {
		msgs[i] = kafka.Message{Key: []byte(keys[i%len(keys)]), Value: strconv.AppendInt(nil, int64(first+i), 10)}
	}
	return msgs
}

// logOrder reads every record of topic, read_uncommitted (the log as it
// is, aborted records included) or read_committed (checker.ReadLog), and
// returns, per key, the values in log order.
func logOrder(t *testing.T, brokers []string, topic string, committed bool) map[string][]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recs, err := checker.ReadLog(ctx, brokers, topic, committed)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]int{}
	for _, r := range recs {
		v, _ := strconv.Atoi(string(r.Value))
		out[r.Key] = append(out[r.Key], v)
	}
	return out
}

// A relay whose produce request is on its way when another relay takes
// its key partitions over (paused past its lease) must not land that
// request after the new owner's later events. With Config.Fence the new
// owner fences the old one's transactional ID before it publishes, and
// the late request is refused: in the log (aborted records included),
// every key's events stay in order, and the late batch is not delivered
// to read_committed consumers. Without the fence, the same late request
// lands after the later events: the defect of issue 30.
func TestFenceRefusesALateProduceOfAFormerOwner(t *testing.T) {
	t.Parallel()
	k := testenv.Kafka(t)
	for _, fence := range []bool{true, false} {
		t.Run(fmt.Sprint("fence=", fence), func(t *testing.T) {
			t.Parallel()
			topic := k.Topic(t, 2)
			keys := []string{"a", "b", "c", "d"}
			old, ctx := fencedPublisher(t, k.Brokers, topic, "old")
			h := newProduceHolder()
			old.dialer.wrap = h.wrap
			publishAll(ctx, t, old, numbered(0, 8, keys))

			h.mu.Lock()
			h.holding = true
			h.mu.Unlock()
			late := make(chan []Result, 1)
			go func() { late <- old.Publish(ctx, numbered(100, 8, keys)) }()
			select {
			case <-h.held:
			case <-ctx.Done():
				t.Fatal("the old owner's produce request was never sent")
			}

			next, _ := fencedPublisher(t, k.Brokers, topic, "next")
			if fence {
				if err := next.FenceMember(ctx, "old"); err != nil {
					t.Fatalf("fence: %v", err)
				}
			}
			publishAll(ctx, t, next, numbered(100, 8, keys))
			publishAll(ctx, t, next, numbered(200, 8, keys))
			close(h.release)
			res := <-late

			published := 0
			for _, r := range res {
				if r.Outcome == Published {
					published++
				} else if fence && !IsOutage(r.Err) {
					t.Errorf("the fenced write failed with %v (%s), want an outage: not the events' fault", r.Err, r.Outcome)
				}
			}
			logged := logOrder(t, k.Brokers, topic, false)
			backwards := 0
			for key, vs := range logged {
				for i := 1; i < len(vs); i++ {
					// A later record of a lower number than the one before it,
					// not starting a copy of what follows it (100 after 100s
					// is the late batch's copy).
					if vs[i] < vs[i-1] && vs[i-1] >= 200 {
						backwards++
						t.Logf("key %s: %d after %d in the log: %v", key, vs[i], vs[i-1], vs)
					}
				}
			}
			if fence {
				if published != 0 {
					t.Errorf("%d messages of the fenced write were reported published", published)
				}
				if backwards != 0 {
					t.Errorf("%d records went back in the log after the fence", backwards)
				}
				for key, vs := range logOrder(t, k.Brokers, topic, true) {
					want := []int{}
					for _, v := range []int{0, 100, 200} {
						for i := v; i < v+8; i++ {
							if keys[i%len(keys)] == key {
								want = append(want, i)
							}
						}
					}
					if fmt.Sprint(vs) != fmt.Sprint(want) {
						t.Errorf("key %s read committed: %v, want %v", key, vs, want)
					}
				}
				return
			}
			// Without the fence the hazard is real: the late request lands
			// after the new owner's later events.
			if backwards == 0 {
				t.Errorf("without the fence no record went back in the log (%d of the late write published): the test no longer holds a request", published)
			}
		})
	}
}

// The fenced path writes transactional batches that read_committed
// consumers read, in order, with their producer ID set; a batch the
// broker refuses (too large) is still a dead letter, its transaction's
// other batches committed.
func TestFencePublishesInTransactions(t *testing.T) {
	t.Parallel()
	k := testenv.Kafka(t)
	topic := k.Topic(t, 3)
	p, ctx := fencedPublisher(t, k.Brokers, topic, "r1")
	keys := []string{"a", "b", "c", "d", "e"}
	for round := range 3 {
		publishAll(ctx, t, p, numbered(round*100, 25, keys))
	}
	if !p.Clean() {
		t.Error("Clean is false after writes that all committed")
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := 0
	last := map[string]int{}
	for got < 75 && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			got++
			if !r.Attrs.IsTransactional() || r.ProducerID < 0 {
				t.Errorf("record %s=%s: transactional %v, producer ID %d", r.Key, r.Value, r.Attrs.IsTransactional(), r.ProducerID)
			}
			v, _ := strconv.Atoi(string(r.Value))
			if prev, ok := last[string(r.Key)]; ok && v < prev {
				t.Errorf("key %s: %d after %d", r.Key, v, prev)
			}
			last[string(r.Key)] = v
		})
	}
	if got != 75 {
		t.Fatalf("read %d committed records, want 75", got)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("timed out")
	}
}

// A produce answer lost after the broker appended (its connection dies)
// is sent again as the same batch inside the same transaction: the broker
// writes it once, the transaction commits, and read_committed consumers
// read every event once, in order, in one Publish call.
func TestFenceWritesOnceWhenTheAnswerIsLost(t *testing.T) {
	t.Parallel()
	k := testenv.Kafka(t)
	topic := k.Topic(t, 3)
	p, ctx := fencedPublisher(t, k.Brokers, topic, "r1")
	d := &answerDropper{}
	p.dialer.wrap = d.wrap
	keys := []string{"a", "b", "c", "d", "e", "f"}
	publishAll(ctx, t, p, numbered(0, 6, keys))
	d.drops.Store(2)
	publishAll(ctx, t, p, numbered(100, 60, keys))
	if d.dropped.Load() == 0 {
		t.Fatal("no answer was dropped")
	}
	got := logOrder(t, k.Brokers, topic, true)
	n := 0
	for key, vs := range got {
		n += len(vs)
		for i := 1; i < len(vs); i++ {
			if vs[i] <= vs[i-1] {
				t.Errorf("key %s read committed: %v: a copy or out of order", key, vs)
				break
			}
		}
	}
	if n != 66 {
		t.Errorf("read %d committed records, want 66 (%d answers dropped)", n, d.dropped.Load())
	}
}
