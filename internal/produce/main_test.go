package produce

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/kafka"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/pgoutbox/outbox/internal/testenv"
)

func TestMain(m *testing.M) {
	testenv.Main(m)
}

var topicSeq atomic.Int64

// broker is a Kafka-protocol broker for one test: a real Apache Kafka
// broker (testenv.Kafka) or an in-process kfake cluster (newFakeBroker),
// whose fault hooks cluster exposes.
type broker struct {
	addrs   []string
	cluster *kfake.Cluster
}

// newBroker returns the test's real Kafka broker (testenv.Kafka: kfake only
// where no JVM can run) with a fresh topic of the given partition count,
// and the topic's name.
func newBroker(tb testing.TB, partitions int32) (*broker, string) {
	tb.Helper()
	k := testenv.Kafka(tb)
	b := &broker{addrs: k.Brokers, cluster: k.Cluster}
	topic := fmt.Sprintf("outbox-kafka-test-%d-%d", time.Now().UnixNano(), topicSeq.Add(1))
	k.NamedTopic(tb, topic, partitions)
	return b, topic
}

// newFakeBroker starts a kfake cluster with opts, for tests that use its
// fault hooks, and creates a fresh topic with the given partition count
// unless opts are given (SASL-enabled clusters create topics themselves).
func newFakeBroker(tb testing.TB, partitions int32, opts ...kfake.Opt) (*broker, string) {
	tb.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	b := &broker{cluster: c, addrs: c.ListenAddrs()}
	topic := fmt.Sprintf("outbox-kafka-test-%d-%d", time.Now().UnixNano(), topicSeq.Add(1))
	if len(opts) == 0 {
		createTopic(tb, b.addrs, topic, partitions)
	}
	return b, topic
}

func createTopic(tb testing.TB, addrs []string, topic string, partitions int32) {
	tb.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, -1
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 30000
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		tb.Fatalf("create topic %s: %v", topic, err)
	}
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			tb.Fatalf("create topic %s: %v", topic, err)
		}
	}
}

// consume reads n records from topic with franz-go (independent of kafka-go).
func consume(tb testing.TB, addrs []string, topic string, n int) []*kgo.Record {
	tb.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(addrs...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for len(recs) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			tb.Fatalf("consumed %d of %d records: %v", len(recs), n, err)
		}
		fs.EachError(func(t string, p int32, err error) { tb.Fatalf("fetch %s/%d: %v", t, p, err) })
		recs = append(recs, fs.Records()...)
	}
	if len(recs) != n {
		tb.Fatalf("consumed %d records, want %d", len(recs), n)
	}
	return recs
}

func newTestPublisher(tb testing.TB, cfg kafka.Config) *Publisher {
	tb.Helper()
	var log *zap.Logger
	if t, ok := tb.(*testing.T); ok {
		log = zaptest.NewLogger(t)
	}
	p, err := NewPublisher(cfg, log)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := p.Close(); err != nil {
			tb.Error(err)
		}
	})
	return p
}

// failProduce makes kfake answer every Produce request that contains
// topic/partition with code, while other requests are handled normally. It
// returns a counter of the requests it answered.
func failProduce(c *kfake.Cluster, topic string, partition int32, code int16) *atomic.Int64 {
	return failProduceN(c, topic, partition, code, 0)
}

// failProduceN is failProduce for the first limit requests only (0: all).
func failProduceN(c *kfake.Cluster, topic string, partition int32, code int16, limit int64) *atomic.Int64 {
	var n atomic.Int64
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.ProduceRequest)
		hit := false
		for _, t := range req.Topics {
			for _, p := range t.Partitions {
				hit = hit || (t.Topic == topic && p.Partition == partition)
			}
		}
		if !hit || (limit > 0 && n.Load() >= limit) {
			return nil, nil, false
		}
		n.Add(1)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, t := range req.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic, rt.TopicID = t.Topic, t.TopicID
			for _, p := range t.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition = p.Partition
				rp.ErrorCode = code
				rp.BaseOffset = -1
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
	return &n
}
