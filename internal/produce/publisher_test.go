package produce

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/kafka"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgoutbox/outbox/internal/testenv"
)

func testMessages(n int, keys []string) []kafka.Message {
	msgs := make([]kafka.Message, n)
	for i := range msgs {
		key := keys[i%len(keys)]
		id := fmt.Sprintf("00000000-0000-0000-0000-%012d", i)
		msgs[i] = kafka.Message{
			Key:   []byte(key),
			Value: []byte(fmt.Sprintf(`{"n":%d,"text":"héllo wörld ✓ 日本語 🚀","key":%q}`, i, key)),
			Headers: []kafka.Header{
				{Key: "event_id", Value: []byte(id)},
				{Key: "event_type", Value: []byte("order.créé")},
				{Key: "aggregate_id", Value: []byte(key)},
				{Key: "trace-id", Value: []byte(fmt.Sprintf("t%d", i))},
				{Key: "empty", Value: nil},
			},
		}
	}
	return msgs
}

func TestRoundTrip(t *testing.T) {
	const partitions = 3
	b, topic := newBroker(t, partitions)
	p := newTestPublisher(t, kafka.Config{Brokers: b.addrs, Topic: topic})

	keys := []string{"order-1", "order-2", "customer-ü", "x", "", "order-42", "a-much-longer-aggregate-id-0123456789"}
	msgs := testMessages(100, keys)
	msgs[7].Value = nil // tombstone
	ctx := context.Background()
	if err := p.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if got := p.PartitionOf(topic, msgs[0].Key); got != -1 {
		t.Fatalf("PartitionOf before any write = %d, want -1", got)
	}
	if err := p.Send(ctx, msgs); err != nil {
		t.Fatalf("Publish: %v", err)
	}

	recs := consume(t, b.addrs, topic, len(msgs))
	byID := map[string]int{}
	for i, m := range msgs {
		byID[string(m.Headers[0].Value)] = i
	}
	lastIndex := map[string]int{}    // key -> index in msgs of the last record seen
	partOf := map[string]int32{}     // key -> partition
	lastOffset := map[string]int64{} // key -> offset of the last record seen
	seen := map[int]bool{}
	// Records of one partition arrive in offset order from kgo.
	for _, r := range recs {
		if len(r.Headers) == 0 {
			t.Fatalf("record without headers: %+v", r)
		}
		i, ok := byID[string(r.Headers[0].Value)]
		if !ok || seen[i] {
			t.Fatalf("unexpected or duplicate record %q", r.Headers[0].Value)
		}
		seen[i] = true
		m := msgs[i]
		if !bytes.Equal(r.Key, m.Key) {
			t.Errorf("msg %d: key %q, want %q", i, r.Key, m.Key)
		}
		if (m.Value == nil) != (r.Value == nil) || !bytes.Equal(r.Value, m.Value) {
			t.Errorf("msg %d: value %q, want %q", i, r.Value, m.Value)
		}
		if len(r.Headers) != len(m.Headers) {
			t.Fatalf("msg %d: %d headers, want %d", i, len(r.Headers), len(m.Headers))
		}
		for j, h := range m.Headers {
			if r.Headers[j].Key != h.Key || !bytes.Equal(r.Headers[j].Value, h.Value) {
				t.Errorf("msg %d header %d: %q=%q, want %q=%q", i, j, r.Headers[j].Key, r.Headers[j].Value, h.Key, h.Value)
			}
		}
		if want := Partition(m.Key, partitions); int(r.Partition) != want {
			t.Errorf("msg %d key %q: partition %d, Partition() = %d", i, m.Key, r.Partition, want)
		}
		if got := p.PartitionOf("", m.Key); got != int(r.Partition) {
			t.Errorf("msg %d key %q: partition %d, PartitionOf() = %d", i, m.Key, r.Partition, got)
		}
		k := string(m.Key)
		if pt, ok := partOf[k]; ok {
			if pt != r.Partition {
				t.Errorf("key %q on partitions %d and %d", k, pt, r.Partition)
			}
			if r.Offset <= lastOffset[k] || i <= lastIndex[k] {
				t.Errorf("key %q out of order: msg %d at offset %d after msg %d at offset %d", k, i, r.Offset, lastIndex[k], lastOffset[k])
			}
		}
		partOf[k], lastOffset[k], lastIndex[k] = r.Partition, r.Offset, i
		if r.Timestamp.Before(time.Now().Add(-time.Minute)) {
			t.Errorf("msg %d: timestamp %v, want about now", i, r.Timestamp)
		}
	}
	used := map[int32]bool{}
	for _, pt := range partOf {
		used[pt] = true
	}
	if len(used) < 2 {
		t.Errorf("keys landed on %d partition(s); test keys should spread", len(used))
	}
}

func TestPartitionVectors(t *testing.T) {
	// murmur2 outputs of the Java client's Utils.murmur2. The first group is
	// from kafka-go's balancer_test.go (taken from librdkafka's rdmurmur2.c
	// unit test, which checks against the Java implementation); the second
	// from Apache Kafka's UtilsTest.testMurmur2 (signed Java ints).
	hashes := []struct {
		key  string
		want uint32
	}{
		{"kafka", 0xd067cf64},
		{"giberish123456789", 0x8f552b0c},
		{"1234", 0x9fc97b14},
		{"234", 0xe7c009ca},
		{"34", 0x873930da},
		{"4", 0x5a4b5ca1},
		{"PreAmbleWillBeRemoved,ThePrePartThatIs", 0x78424f1c},
		{"reAmbleWillBeRemoved,ThePrePartThatIs", 0x4a62b377},
		{"eAmbleWillBeRemoved,ThePrePartThatIs", 0xe0e4e09e},
		{"AmbleWillBeRemoved,ThePrePartThatIs", 0x62b8b43f},
		{"", 0x106e08d9},

		{"21", uint32(int32ToU(-973932308))},
		{"foobar", uint32(int32ToU(-790332482))},
		{"a-little-bit-long-string", uint32(int32ToU(-985981536))},
		{"a-little-bit-longer-string", uint32(int32ToU(-1486304829))},
		{"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", uint32(int32ToU(-58897971))},
		{"abc", 479470107},
	}
	for _, c := range hashes {
		if got := murmur2([]byte(c.key)); got != c.want {
			t.Errorf("murmur2(%q) = %#x, want %#x", c.key, got, c.want)
		}
	}
	if murmur2(nil) != murmur2([]byte{}) {
		t.Error("nil and empty keys hash differently")
	}

	// Partitions over 1000 partitions from kafka-python's Murmur2Partitioner
	// test (test_partitioner.py), also in kafka-go's balancer_test.go.
	parts := []struct {
		key  []byte
		want int
	}{
		{[]byte(""), 681}, {[]byte("a"), 524}, {[]byte("ab"), 434},
		{[]byte("abc"), 107}, {[]byte("123456789"), 566}, {[]byte{0, ' '}, 742},
	}
	for _, c := range parts {
		if got := Partition(c.key, 1000); got != c.want {
			t.Errorf("Partition(%q, 1000) = %d, want %d", c.key, got, c.want)
		}
	}

	// Cross-check with franz-go's Kafka-compatible key partitioner and with
	// the kafka-go balancer the Writer actually uses.
	rng := rand.New(rand.NewPCG(1, 2))
	kgoPart := kgo.StickyKeyPartitioner(nil).ForTopic("t")
	bal := kafkago.Murmur2Balancer{Consistent: true}
	all := make([]int, 1024)
	for i := range all {
		all[i] = i
	}
	for i := 0; i < 20000; i++ {
		key := make([]byte, rng.IntN(64))
		for j := range key {
			key[j] = byte(rng.UintN(256))
		}
		n := 1 + rng.IntN(len(all))
		got := Partition(key, n)
		if want := kgoPart.Partition(&kgo.Record{Key: key}, n); got != want {
			t.Fatalf("Partition(%x, %d) = %d, franz-go %d", key, n, got, want)
		}
		if want := bal.Balance(kafkago.Message{Key: key}, all[:n]...); got != want {
			t.Fatalf("Partition(%x, %d) = %d, kafka-go Murmur2Balancer %d", key, n, got, want)
		}
	}
}

func int32ToU(v int32) uint32 { return uint32(v) }

func TestPartitionLanding(t *testing.T) {
	for _, n := range []int32{1, 5, 7} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			b, topic := newBroker(t, n)
			p := newTestPublisher(t, kafka.Config{Brokers: b.addrs, Topic: topic})
			var msgs []kafka.Message
			for i := 0; i < 50; i++ {
				id := fmt.Sprintf("agg-%d", i)
				msgs = append(msgs, kafka.Message{Key: []byte(id), Value: []byte(`{}`), Headers: []kafka.Header{{Key: "event_id", Value: []byte(id)}}})
			}
			if err := p.Send(context.Background(), msgs); err != nil {
				t.Fatal(err)
			}
			for _, r := range consume(t, b.addrs, topic, len(msgs)) {
				if want := Partition(r.Key, int(n)); int(r.Partition) != want {
					t.Errorf("key %q: partition %d, want %d", r.Key, r.Partition, want)
				}
			}
		})
	}
}

// freePort returns an address that refuses connections while the test
// runs (testenv.RefusedAddr).
func freePort(t *testing.T) string { return testenv.RefusedAddr(t) }

func TestBrokerDown(t *testing.T) {
	const writeTimeout = 2 * time.Second
	msgs := testMessages(10, []string{"a", "b", "c"})

	// The longest a Publish call of one request may take, as AttemptBudget
	// documents it: the budget plus the first metadata of a new connection,
	// bounded by DialTimeout.
	worstCase := func(p *Publisher) time.Duration { return p.AttemptBudget() + p.cfg.DialTimeout }

	t.Run("refused", func(t *testing.T) {
		p := newTestPublisher(t, kafka.Config{Brokers: []string{freePort(t)}, Topic: "t", WriteTimeout: writeTimeout})
		start := time.Now()
		err := p.Send(context.Background(), msgs)
		if err == nil {
			t.Fatal("Publish succeeded with no broker")
		}
		if d := time.Since(start); d > worstCase(p) {
			t.Errorf("Publish took %v, over AttemptBudget %v + DialTimeout %v", d, p.AttemptBudget(), p.cfg.DialTimeout)
		}
		if !IsRetriable(err) {
			t.Errorf("IsRetriable(%v) = false", err)
		}
		perr := p.Ping(context.Background())
		if perr == nil || !IsRetriable(perr) {
			t.Errorf("Ping: %v, want retriable error", perr)
		}
		t.Logf("publish: %v; ping: %v", err, perr)
	})

	t.Run("closed", func(t *testing.T) {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "t"))
		if err != nil {
			t.Fatal(err)
		}
		p := newTestPublisher(t, kafka.Config{Brokers: c.ListenAddrs(), Topic: "t", WriteTimeout: writeTimeout})
		if err := p.Send(context.Background(), msgs); err != nil {
			t.Fatal(err)
		}
		c.Close()
		start := time.Now()
		err = p.Send(context.Background(), msgs)
		if err == nil {
			t.Fatal("Publish succeeded after the broker closed")
		}
		// MaxAttempts (3) attempts, each bounded by WriteTimeout, plus backoff.
		if d := time.Since(start); d > worstCase(p) {
			t.Errorf("Publish took %v, over AttemptBudget %v + DialTimeout %v", d, p.AttemptBudget(), p.cfg.DialTimeout)
		}
		if !IsRetriable(err) {
			t.Errorf("IsRetriable(%v) = false", err)
		}
		var pe *PublishError
		if errors.As(err, &pe) {
			for i, e := range pe.Errs {
				// An outage stays an outage: the metadata refresh after the
				// failed produce request (refreshingTransport) fails and
				// keeps the cached metadata instead of turning the error
				// into an unknown-topic one.
				if e == nil || !IsOutage(e) {
					t.Errorf("Errs[%d] = %v, want an unreachable error", i, e)
				}
			}
		}
		t.Logf("after %v: %v", time.Since(start), err)
	})

	t.Run("ctx", func(t *testing.T) {
		// A listener that accepts but never answers: only ctx ends the call.
		// The Publisher's own timeouts are long, so that a call that ends
		// before them was ended by ctx, however slow the machine (a
		// timeout of DialTimeout's is a deadline error too).
		const long = 30 * time.Second
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = l.Close() }()
		p := newTestPublisher(t, kafka.Config{Brokers: []string{l.Addr().String()}, Topic: "t", WriteTimeout: long, DialTimeout: long})
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		err = p.Send(ctx, msgs)
		if !errors.Is(err, context.DeadlineExceeded) || !IsRetriable(err) {
			t.Errorf("Publish = %v, want retriable deadline exceeded", err)
		}
		if d := time.Since(start); d >= long {
			t.Errorf("Publish took %v with a 200ms ctx: ended by WriteTimeout or DialTimeout (%v), not by ctx", d, long)
		}
	})
}

func TestInjectedProduceErrors(t *testing.T) {
	const partitions = 3
	cases := []struct {
		name      string
		code      int16
		kafkaErr  kafkago.Error
		retriable bool
	}{
		{"message_too_large", kerr.MessageTooLarge.Code, kafkago.MessageSizeTooLarge, false},
		{"not_leader", kerr.NotLeaderForPartition.Code, kafkago.NotLeaderForPartition, true},
		{"not_enough_replicas", kerr.NotEnoughReplicas.Code, kafkago.NotEnoughReplicas, true},
		{"topic_authorization_failed", kerr.TopicAuthorizationFailed.Code, kafkago.TopicAuthorizationFailed, true},
		{"corrupt_message", kerr.CorruptMessage.Code, kafkago.InvalidMessage, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, topic := newFakeBroker(t, partitions)
			p := newTestPublisher(t, kafka.Config{Brokers: b.addrs, Topic: topic, MaxAttempts: 2})
			msgs := testMessages(60, []string{"k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8"})
			const bad = 1
			n := failProduce(b.cluster, topic, bad, c.code)

			err := p.Send(context.Background(), msgs)
			var pe *PublishError
			if !errors.As(err, &pe) || len(pe.Errs) != len(msgs) {
				t.Fatalf("Publish = %v, want *PublishError with %d entries", err, len(msgs))
			}
			failed := 0
			for i, e := range pe.Errs {
				onBad := Partition(msgs[i].Key, partitions) == bad
				switch {
				case onBad && e == nil:
					t.Errorf("msg %d on partition %d delivered", i, bad)
				case !onBad && e != nil:
					t.Errorf("msg %d on another partition failed: %v", i, e)
				case onBad:
					failed++
					if !errors.Is(e, c.kafkaErr) {
						t.Errorf("Errs[%d] = %v, want %v", i, e, c.kafkaErr)
					}
					if IsRetriable(e) != c.retriable {
						t.Errorf("IsRetriable(%v) = %v, want %v", e, !c.retriable, c.retriable)
					}
				}
			}
			if failed == 0 || failed == len(msgs) {
				t.Fatalf("%d of %d failed; want only partition %d's", failed, len(msgs), bad)
			}
			if IsRetriable(err) != c.retriable {
				t.Errorf("IsRetriable(PublishError) = %v, want %v", !c.retriable, c.retriable)
			}
			wantMsg := fmt.Sprintf("publish: %d of %d messages failed: ", failed, len(msgs))
			if !strings.HasPrefix(err.Error(), wantMsg) {
				t.Errorf("Error() = %q, want prefix %q", err, wantMsg)
			}
			wantAttempts := int64(1)
			if c.kafkaErr.Temporary() {
				wantAttempts = 2 // kafka-go retries what it calls temporary, up to MaxAttempts
			}
			if got := n.Load(); got != wantAttempts {
				t.Errorf("%d produce attempts for partition %d, want %d", got, bad, wantAttempts)
			}
			// The other partitions' messages really arrived.
			recs := consume(t, b.addrs, topic, len(msgs)-failed)
			for _, r := range recs {
				if r.Partition == bad {
					t.Errorf("record on failed partition %d", bad)
				}
			}
		})
	}
}

func TestMessageTooLargeForBatchBytes(t *testing.T) {
	b, topic := newBroker(t, 2)
	p := newTestPublisher(t, kafka.Config{Brokers: b.addrs, Topic: topic, BatchBytes: 4096})
	msgs := testMessages(10, []string{"a", "b"})
	msgs[3].Value = bytes.Repeat([]byte("x"), 5000)
	err := p.Send(context.Background(), msgs)
	var pe *PublishError
	if !errors.As(err, &pe) {
		t.Fatalf("Publish = %v, want *PublishError", err)
	}
	for i, e := range pe.Errs {
		if (i == 3) != (e != nil) {
			t.Errorf("Errs[%d] = %v", i, e)
		}
	}
	if !errors.Is(pe.Errs[3], kafkago.MessageSizeTooLarge) || IsRetriable(pe.Errs[3]) {
		t.Errorf("Errs[3] = %v, want permanent MessageSizeTooLarge", pe.Errs[3])
	}
	if got := MessageSize(&msgs[3]); got <= p.MaxBatchBytes() {
		t.Errorf("MessageSize = %d, not over %d", got, p.MaxBatchBytes())
	}
	consume(t, b.addrs, topic, 9)
}

func TestSplitLargeCalls(t *testing.T) {
	b, topic := newFakeBroker(t, 3)
	p := newTestPublisher(t, kafka.Config{Brokers: b.addrs, Topic: topic, BatchSize: 10, BatchBytes: 2000})
	if p.MaxBatchMessages() != 10 || p.MaxBatchBytes() != 2000 {
		t.Fatalf("limits %d/%d", p.MaxBatchMessages(), p.MaxBatchBytes())
	}
	keys := []string{"a", "b", "c", "d"}
	msgs := testMessages(57, keys)
	for i, r := range p.Publish(context.Background(), msgs) {
		if r.Outcome != Published {
			t.Fatalf("msgs[%d]: %v %v", i, r.Outcome, r.Err)
		}
	}
	recs := consume(t, b.addrs, topic, len(msgs))
	next := map[string]int{} // per key: index into the key's publish order
	order := map[string][]string{}
	for _, m := range msgs {
		order[string(m.Key)] = append(order[string(m.Key)], string(m.Headers[0].Value))
	}
	for _, r := range recs {
		k := string(r.Key)
		if want := order[k][next[k]]; string(r.Headers[0].Value) != want {
			t.Fatalf("key %q: got %s, want %s", k, r.Headers[0].Value, want)
		}
		next[k]++
	}

	t.Run("hold_after_failure", func(t *testing.T) {
		bad := Partition(msgs[0].Key, 3)
		failProduce(b.cluster, topic, int32(bad), kerr.InvalidRecord.Code)
		// msgs[0]'s partition refuses every request: the first message of
		// each of its keys is sent again alone and is a DeadLetter, the
		// later ones of its key are Held, not sent; the other keys' go on.
		failedKeys := map[string]bool{}
		for i, r := range p.Publish(context.Background(), msgs) {
			k := string(msgs[i].Key)
			onBad := Partition(msgs[i].Key, 3) == bad
			switch {
			case !onBad && r.Outcome != Published:
				t.Errorf("msgs[%d] (key %s, another partition): %v %v", i, k, r.Outcome, r.Err)
			case onBad && !failedKeys[k] && (r.Outcome != DeadLetter || !errors.Is(r.Err, kafkago.InvalidRecord) || r.Reason != "invalid_record"):
				t.Errorf("msgs[%d] (key %s, first on the failing partition): %v %q %v, want a dead letter", i, k, r.Outcome, r.Reason, r.Err)
			case onBad && failedKeys[k] && (r.Outcome != Held || r.Err == nil):
				t.Errorf("msgs[%d] (key %s, after its key failed): %v %v, want held", i, k, r.Outcome, r.Err)
			}
			if onBad {
				failedKeys[k] = true
			}
		}
		if len(failedKeys) == 0 || len(failedKeys) == len(keys) {
			t.Errorf("%d of %d keys failed", len(failedKeys), len(keys))
		}
	})
}

func TestCloseAndNoTopic(t *testing.T) {
	b, topic := newBroker(t, 1)
	p, err := NewPublisher(kafka.Config{Brokers: b.addrs}, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = p.Send(context.Background(), []kafka.Message{{Topic: topic, Value: []byte("1")}, {Value: []byte("2")}})
	if !errors.Is(err, errNoTopic) || IsRetriable(err) || !strings.Contains(err.Error(), "Config.Topic") {
		t.Errorf("Publish = %v, want errNoTopic naming Config.Topic", err)
	}
	if err := p.Send(context.Background(), []kafka.Message{{Topic: topic, Value: []byte("1")}}); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	err = p.Send(context.Background(), []kafka.Message{{Topic: topic}})
	if !errors.Is(err, errClosed) || IsRetriable(err) {
		t.Errorf("Publish after Close = %v", err)
	}
	if err := p.Ping(context.Background()); !errors.Is(err, errClosed) {
		t.Errorf("Ping after Close = %v", err)
	}
	if err := p.Send(context.Background(), nil); err != nil {
		t.Errorf("empty Publish = %v", err)
	}
}

// TestOneRequestPerPartition checks the reading of kafka-go's writer that
// the tiny BatchTimeout does not split one Publish call: each partition's
// messages of a call go in exactly one produce request.
func TestOneRequestPerPartition(t *testing.T) {
	const partitions = 3
	b, topic := newFakeBroker(t, partitions)
	p := newTestPublisher(t, kafka.Config{Brokers: b.addrs, Topic: topic, BatchTimeout: time.Nanosecond})
	var mu sync.Mutex
	reqs := map[int32]int{} // partition -> produce requests
	recs := map[int32]int{} // partition -> records
	b.cluster.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		b.cluster.KeepControl()
		mu.Lock()
		defer mu.Unlock()
		for _, rt := range kreq.(*kmsg.ProduceRequest).Topics {
			for _, rp := range rt.Partitions {
				reqs[rp.Partition]++
				var batch kmsg.RecordBatch
				if err := batch.ReadFrom(rp.Records); err != nil {
					t.Errorf("decode batch: %v", err)
				}
				recs[rp.Partition] += int(batch.NumRecords)
			}
		}
		return nil, nil, false
	})
	for round := 0; round < 5; round++ {
		msgs := testMessages(500, []string{"a", "b", "c", "d", "e", "f", "g", "h"})
		if err := p.Send(context.Background(), msgs); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		if len(reqs) != partitions {
			t.Fatalf("requests per partition: %v", reqs)
		}
		total := 0
		for pt, n := range reqs {
			if n != 1 {
				t.Errorf("round %d: partition %d got %d produce requests for one Publish, want 1", round, pt, n)
			}
			total += recs[pt]
		}
		if total != len(msgs) {
			t.Errorf("round %d: %d records in requests, want %d", round, total, len(msgs))
		}
		clear(reqs)
		clear(recs)
		mu.Unlock()
	}
}

// TestOneRequestPerCallAtEverySize publishes calls of many sizes (the
// Publisher sets kafka-go's BatchSize to each call's length), all of one
// key and so of one partition: each call must reach the broker as one
// produce request holding all its records, and a consumer must read them
// in order.
func TestOneRequestPerCallAtEverySize(t *testing.T) {
	b, topic := newFakeBroker(t, 1)
	p := newTestPublisher(t, kafka.Config{Brokers: b.addrs, Topic: topic})
	requests := countProducedRecords(t, b.cluster)
	sizes := []int{1, 2, 15, 16, 17, 127, 128, 129, 500, 1000, 1}
	total := 0
	for _, n := range sizes {
		msgs := make([]kafka.Message, n)
		for i := range msgs {
			msgs[i] = kafka.Message{Key: []byte("k"), Value: []byte(strconv.Itoa(total + i))}
		}
		if err := p.Send(context.Background(), msgs); err != nil {
			t.Fatalf("publish %d: %v", n, err)
		}
		total += n
		if recs := requests(); len(recs) != 1 || recs[0] != n {
			t.Errorf("a call of %d messages of one partition: produce requests with %v records, want one with %d", n, recs, n)
		}
	}
	for i, r := range consume(t, b.addrs, topic, total) {
		if got := string(r.Value); got != strconv.Itoa(i) {
			t.Fatalf("record %d has value %s: out of order", i, got)
		}
	}
}

// TestTimedOutPublishIsNotOvertaken: a call whose ctx ends while kafka-go
// backs off before retrying (a timeout, or a shutdown) leaves its batch queued in kafka-go, which may
// still deliver it; the next call's messages of the same key must not land
// before it, whatever the two calls' sizes (a version with one kafka-go
// Writer per batch size let them: the log read [2 1]).
func TestTimedOutPublishIsNotOvertaken(t *testing.T) {
	for _, c := range []struct{ first, second int }{{20, 1}, {1, 20}, {5, 5}, {200, 3}, {3, 200}} {
		t.Run(fmt.Sprintf("%d_then_%d", c.first, c.second), func(t *testing.T) {
			b, topic := newFakeBroker(t, 1)
			p := newTestPublisher(t, kafka.Config{Brokers: b.addrs, Topic: topic})
			ctx := context.Background()
			if err := p.Send(ctx, []kafka.Message{{Key: []byte("k"), Value: []byte("warm-up")}}); err != nil {
				t.Fatal(err)
			}
			// The next produce request is answered with a retriable error
			// once: kafka-go backs off at least 100ms before its retry.
			n := failProduceN(b.cluster, topic, 0, kerr.NotEnoughReplicas.Code, 1)
			call := func(name string, size int) []kafka.Message {
				msgs := make([]kafka.Message, size)
				for i := range msgs {
					msgs[i] = kafka.Message{Key: []byte("k"), Value: []byte(fmt.Sprintf("%s-%d", name, i))}
				}
				return msgs
			}
			// The first call's ctx ends once its request has been
			// answered with the error (kafka-go then backs off), not
			// after a fixed time: under load a short timer could end
			// it before the request reached the broker.
			short, cancel := context.WithCancel(ctx)
			// The retry waits at the broker until that ctx has ended:
			// on a loaded machine the cancel below could otherwise come
			// after the 100ms backoff and the retry's success.
			var held atomic.Bool
			b.cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
				b.cluster.KeepControl()
				if held.CompareAndSwap(false, true) {
					b.cluster.SleepControl(func() { <-short.Done() })
				}
				return nil, nil, false
			})
			go func() {
				defer cancel()
				for deadline := time.Now().Add(10 * time.Second); n.Load() < 1 && time.Now().Before(deadline); {
					time.Sleep(time.Millisecond)
				}
			}()
			err := p.Send(short, call("first", c.first))
			cancel()
			if got := n.Load(); got != 1 {
				t.Fatalf("%d produce requests failed, want 1 (first Publish = %v)", got, err)
			}
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("first Publish = %v, want its ctx canceled during the retry backoff", err)
			}
			if err := p.Send(ctx, call("second", c.second)); err != nil {
				t.Fatalf("second Publish: %v", err)
			}
			recs := consume(t, b.addrs, topic, 1+c.first+c.second)
			seen := map[string]int{}
			for _, r := range recs[1:] {
				name, i, _ := strings.Cut(string(r.Value), "-")
				if name == "first" && seen["second"] > 0 {
					t.Fatalf("%s arrived after %d records of the second call (log: %s ...)", r.Value, seen["second"], recs[1].Value)
				}
				if want := strconv.Itoa(seen[name]); i != want {
					t.Fatalf("%s arrived where %s-%s was due", r.Value, name, want)
				}
				seen[name]++
			}
		})
	}
}

// TestConcurrentCallsKeepOneRequestPerPartition: Publish calls from
// several goroutines at once are sent one at a time, so each call's
// messages (one key, one partition) travel in one produce request of their
// own: the requests' record counts are exactly the calls' sizes. kafka-go
// shares a partition's batch between concurrent calls on one Writer, and
// sends it when it holds BatchSize messages, which would merge calls or
// split one between requests.
func TestConcurrentCallsKeepOneRequestPerPartition(t *testing.T) {
	b, topic := newFakeBroker(t, 1)
	p := newTestPublisher(t, kafka.Config{Brokers: b.addrs, Topic: topic})
	requests := countProducedRecords(t, b.cluster)
	const goroutines, calls = 4, 25
	var sizes []int
	for i := range goroutines * calls {
		sizes = append(sizes, 1+i*37%120)
	}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for _, size := range sizes[g*calls : (g+1)*calls] {
				msgs := make([]kafka.Message, size)
				for i := range msgs {
					msgs[i] = kafka.Message{Key: []byte("k"), Value: []byte(strconv.Itoa(i))}
				}
				if err := p.Send(context.Background(), msgs); err != nil {
					t.Errorf("publish: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	counts := requests()
	slices.Sort(sizes)
	slices.Sort(counts)
	if !slices.Equal(counts, sizes) {
		t.Fatalf("produce requests' record counts %v, want the calls' sizes %v", counts, sizes)
	}
}

// countProducedRecords makes c count the records of each partition's batch
// in every produce request; the function returned gives the counts so far,
// in arrival order, and starts over.
func countProducedRecords(t *testing.T, c *kfake.Cluster) func() []int {
	var mu sync.Mutex
	var counts []int
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		mu.Lock()
		defer mu.Unlock()
		for _, rt := range kreq.(*kmsg.ProduceRequest).Topics {
			for _, rp := range rt.Partitions {
				var batch kmsg.RecordBatch
				if err := batch.ReadFrom(rp.Records); err != nil {
					t.Errorf("decode batch: %v", err)
				}
				counts = append(counts, int(batch.NumRecords))
			}
		}
		return nil, nil, false
	})
	return func() []int {
		mu.Lock()
		defer mu.Unlock()
		got := counts
		counts = nil
		return got
	}
}
