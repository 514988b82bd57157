package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgoutbox/outbox/internal/kafkatemp"
)

// TestKafka is a Kafka cluster for one test.
type TestKafka struct {
	// Brokers are the seed broker addresses, host:port.
	Brokers []string
	// Cluster is the in-process kfake cluster, for fault injection
	// (Cluster.ControlKey etc.); nil for a real broker.
	Cluster *kfake.Cluster
	// Real is the Apache Kafka cluster started for this test or package
	// (kill, pause and restart its nodes); nil for kfake and for brokers
	// named by OUTBOX_TEST_KAFKA_BROKERS.
	Real *kafkatemp.Cluster
	// Version is the Kafka version of a real broker ("4.4.0"), or "kfake".
	Version string
}

// Kafka returns the Kafka broker for t, a real Apache Kafka broker
// whenever one can run:
//
//   - the brokers listed in OUTBOX_TEST_KAFKA_BROKERS (comma-separated),
//     as `make test` sets them (scripts/with-kafka.sh), of the version in
//     OUTBOX_TEST_KAFKA_VERSION;
//   - else, unless OUTBOX_TEST_KAFKA=kfake, one real single broker of
//     OUTBOX_TEST_KAFKA_VERSION (default 4.4.0) started for the test
//     package on first use (internal/kafkatemp) and stopped by Main; when
//     java or mvn is missing it prints once what to install and falls back
//     to kfake, except under CI=true (or OUTBOX_TEST_KAFKA=real), where it
//     fails the test;
//   - else a new one-broker kfake cluster, closed when the test ends.
//
// Automatic topic creation is on in all three. Tests that need kfake's
// fault hooks call KafkaFake.
func Kafka(t testing.TB) *TestKafka {
	t.Helper()
	if v := os.Getenv(EnvKafkaBrokers); v != "" {
		var brokers []string
		for _, b := range strings.Split(v, ",") {
			if b = strings.TrimSpace(b); b != "" {
				brokers = append(brokers, b)
			}
		}
		return &TestKafka{Brokers: brokers, Version: kafkaVersion()}
	}
	if os.Getenv(EnvKafka) != "kfake" {
		if c := sharedRealKafka(t, "single", kafkatemp.Options{Version: kafkaVersion()}); c != nil {
			return &TestKafka{Brokers: c.Brokers(), Real: c, Version: c.Version()}
		}
	}
	return KafkaFake(t)
}

// KafkaFake returns a new one-broker in-process kfake cluster listening on
// 127.0.0.1 at a random port, with automatic topic creation enabled, closed
// when the test ends: for tests that inject faults through kfake's hooks
// (Cluster.ControlKey, Cluster.Fault) or its listener. Extra kfake options
// (e.g. kfake.SeedTopics) are appended to the defaults.
func KafkaFake(t testing.TB, opts ...kfake.Opt) *TestKafka {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{
		kfake.NumBrokers(1),
		kfake.AllowAutoTopicCreation(),
	}, opts...)...)
	if err != nil {
		t.Fatalf("testenv: kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return &TestKafka{Brokers: c.ListenAddrs(), Cluster: c, Version: "kfake"}
}

// RealKafka starts a real Apache Kafka cluster for t alone (see
// internal/kafkatemp; opts.FastStart is set), stopped when the test ends:
// for tests that change broker settings or kill, pause and restart
// brokers. Without java or mvn it skips t, saying what to install, except
// under CI=true (or OUTBOX_TEST_KAFKA=real), where it fails t.
func RealKafka(t testing.TB, opts kafkatemp.Options) *TestKafka {
	t.Helper()
	requireKafkaTools(t)
	c := startRealKafka(t, opts)
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("testenv: %v", err)
		}
	})
	return &TestKafka{Brokers: c.Brokers(), Real: c, Version: c.Version()}
}

// SharedRealKafka is RealKafka for a cluster that the test package's tests
// share: started by the first call with that name and stopped by Main.
// Tests that kill, pause or reconfigure its brokers must undo it before
// they end.
func SharedRealKafka(t testing.TB, name string, opts kafkatemp.Options) *TestKafka {
	t.Helper()
	requireKafkaTools(t)
	c := sharedRealKafka(t, name, opts)
	return &TestKafka{Brokers: c.Brokers(), Real: c, Version: c.Version()}
}

// kafkaVersion is the version of real brokers the tests use.
func kafkaVersion() string {
	if v := os.Getenv(EnvKafkaVersion); v != "" {
		return v
	}
	return kafkatemp.V44
}

// kafkaRequired reports whether a missing real broker fails the test
// instead of skipping it or falling back to kfake.
func kafkaRequired() bool {
	return os.Getenv("CI") == "true" || os.Getenv(EnvKafka) == "real"
}

var kafkaToolsNote sync.Once

// RequireKafkaTools skips t, saying what to install, when java or mvn (what
// internal/kafkatemp needs to run a real broker) is missing, except under
// CI=true (or OUTBOX_TEST_KAFKA=real), where it fails t: for tests that
// start a real broker some other way than RealKafka.
func RequireKafkaTools(t testing.TB) {
	t.Helper()
	requireKafkaTools(t)
}

// requireKafkaTools skips or fails t when java or mvn is missing.
func requireKafkaTools(t testing.TB) {
	t.Helper()
	if err := kafkatemp.CheckTools(); err != nil {
		if kafkaRequired() {
			t.Fatalf("testenv: %v", err)
		}
		t.Skipf("testenv: %v", err)
	}
}

var realKafka struct {
	mu       sync.Mutex
	clusters map[string]*realKafkaEntry
}

type realKafkaEntry struct {
	once sync.Once
	c    *kafkatemp.Cluster
	err  error
}

// sharedRealKafka returns the package's cluster of that name, starting it
// on first use; nil (after a note printed once) when java or mvn is
// missing and a real broker is not required.
func sharedRealKafka(t testing.TB, name string, opts kafkatemp.Options) *kafkatemp.Cluster {
	t.Helper()
	if err := kafkatemp.CheckTools(); err != nil {
		if kafkaRequired() {
			t.Fatalf("testenv: %v", err)
		}
		kafkaToolsNote.Do(func() { fmt.Fprintf(os.Stderr, "testenv: %v; using the in-process kfake broker\n", err) })
		return nil
	}
	env.mu.Lock()
	active := env.mainActive
	env.mu.Unlock()
	if !active {
		t.Fatalf("testenv: a shared Kafka broker needs testenv.Main (add `func TestMain(m *testing.M) { testenv.Main(m) }`), or set %s", EnvKafkaBrokers)
	}
	realKafka.mu.Lock()
	if realKafka.clusters == nil {
		realKafka.clusters = map[string]*realKafkaEntry{}
	}
	e := realKafka.clusters[name]
	if e == nil {
		e = &realKafkaEntry{}
		realKafka.clusters[name] = e
	}
	realKafka.mu.Unlock()
	e.once.Do(func() {
		opts.FastStart = true
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		began := time.Now()
		e.c, e.err = kafkatemp.Start(ctx, opts)
		if e.err == nil {
			fmt.Fprintf(os.Stderr, "testenv: Kafka %s (%d broker(s), %q) at %s, started in %s\n",
				e.c.Version(), len(e.c.Nodes()), name, strings.Join(e.c.Brokers(), ","), time.Since(began).Round(100*time.Millisecond))
			addTeardown(e.c.Close)
		}
	})
	if e.err != nil {
		t.Fatalf("testenv: Kafka: %v", e.err)
	}
	return e.c
}

func startRealKafka(t testing.TB, opts kafkatemp.Options) *kafkatemp.Cluster {
	t.Helper()
	opts.FastStart = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := kafkatemp.Start(ctx, opts)
	if err != nil {
		t.Fatalf("testenv: Kafka: %v", err)
	}
	return c
}

// Client returns a new franz-go client seeded with k's brokers plus opts,
// closed when the test ends (closing it earlier is fine).
func (k *TestKafka) Client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(k.Brokers...)}, opts...)...)
	if err != nil {
		t.Fatalf("testenv: kafka client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Topic creates a topic with the given number of partitions (replication
// factor: the broker default) and a unique name derived from t.Name(), and
// waits up to 30 seconds until every partition has a leader in the
// cluster's metadata. It returns the name.
func (k *TestKafka) Topic(t testing.TB, partitions int32) string {
	t.Helper()
	return k.NamedTopic(t, topicName(t.Name()), partitions)
}

// TopicName returns the unique topic name Topic would create for t, without
// creating it (tests of a topic that does not exist yet).
func TopicName(t testing.TB) string { return topicName(t.Name()) }

// NamedTopic creates the topic name (see Topic) and returns it.
func (k *TestKafka) NamedTopic(t testing.TB, name string, partitions int32) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatalf("testenv: kafka client: %v", err)
	}
	defer cl.Close()

	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic = name
	rt.NumPartitions = partitions
	rt.ReplicationFactor = -1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("testenv: create topic %s: %v", name, err)
	}
	for _, rt := range resp.Topics {
		if err := kerr.ErrorForCode(rt.ErrorCode); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			msg := ""
			if rt.ErrorMessage != nil {
				msg = ": " + *rt.ErrorMessage
			}
			t.Fatalf("testenv: create topic %s: %v%s", name, err, msg)
		}
	}

	var last string
	for {
		last = topicReady(ctx, cl, name, partitions)
		if last == "" {
			return name
		}
		select {
		case <-ctx.Done():
			t.Fatalf("testenv: topic %s not ready: %s", name, last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// topicReady returns "" when topic has want partitions, each with a leader,
// else what is missing.
func topicReady(ctx context.Context, cl *kgo.Client, topic string, want int32) string {
	req := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, mt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err.Error()
	}
	for _, rt := range resp.Topics {
		if rt.Topic == nil || *rt.Topic != topic {
			continue
		}
		if err := kerr.ErrorForCode(rt.ErrorCode); err != nil {
			return err.Error()
		}
		if int32(len(rt.Partitions)) != want {
			return fmt.Sprintf("%d of %d partitions", len(rt.Partitions), want)
		}
		for _, p := range rt.Partitions {
			if p.Leader < 0 {
				return fmt.Sprintf("partition %d has no leader", p.Partition)
			}
		}
		return ""
	}
	return "not in metadata"
}

// topicName makes a unique legal topic name ([a-zA-Z0-9._-], at most 249
// characters) from a test name.
func topicName(testName string) string {
	var b strings.Builder
	for _, r := range testName {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	s := b.String()
	if len(s) > 200 {
		s = s[:200]
	}
	return "t-" + s + "-" + randHex(6)
}

// Record is a consumed Kafka record.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	// Headers maps each header key to its value; for a key repeated in
	// the record, the last value wins.
	Headers   map[string]string
	Timestamp time.Time
}

func toRecord(r *kgo.Record) Record {
	h := make(map[string]string, len(r.Headers))
	for _, kv := range r.Headers {
		h[kv.Key] = string(kv.Value)
	}
	return Record{
		Topic:     r.Topic,
		Partition: r.Partition,
		Offset:    r.Offset,
		Key:       r.Key,
		Value:     r.Value,
		Headers:   h,
		Timestamp: r.Timestamp,
	}
}

// Consume reads topic from the start of every partition, with an
// independent franz-go client and read_committed isolation, until it has
// at least want records or timeout has passed, and returns what it read
// (possibly fewer or more than want; callers assert). Records are in
// arrival order, which is offset order within a partition.
func (k *TestKafka) Consume(t testing.TB, topic string, want int, timeout time.Duration) []Record {
	t.Helper()
	c := k.Consumer(t, topic)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out []Record
	for len(out) < want {
		r, err := c.Next(ctx)
		if err != nil {
			break
		}
		out = append(out, r)
	}
	// Include whatever else is already buffered, so duplicates show up.
	out = append(out, c.buf...)
	c.buf = nil
	return out
}

// EndOffsets returns the end offset of each of topic's partitions now:
// with ConsumeFrom, what is written from now on.
func (k *TestKafka) EndOffsets(t testing.TB, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	offs, err := kadm.NewClient(k.Client(t)).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("testenv: end offsets of %s: %v", topic, err)
	}
	out := map[int32]int64{}
	offs.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// clientFrom is a client reading topic from the given offsets, one per
// partition (EndOffsets).
func (k *TestKafka) clientFrom(t testing.TB, topic string, from map[int32]int64) *kgo.Client {
	t.Helper()
	offsets := map[int32]kgo.Offset{}
	for p, o := range from {
		offsets[p] = kgo.NewOffset().At(o)
	}
	return k.Client(t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}), kgo.FetchMaxWait(250*time.Millisecond))
}

// ConsumeFrom is Consume from the given offsets (EndOffsets) instead of
// the start of every partition.
func (k *TestKafka) ConsumeFrom(t testing.TB, topic string, from map[int32]int64, want int, timeout time.Duration) []Record {
	t.Helper()
	cl := k.clientFrom(t, topic, from)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out []Record
	for len(out) < want && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { out = append(out, toRecord(r)) })
	}
	return out
}

// FindFrom reads topic from the given offsets (EndOffsets) until a record
// matches, and returns it; false after timeout. Other records (of tests
// sharing the topic on a real broker) are skipped.
func (k *TestKafka) FindFrom(t testing.TB, topic string, from map[int32]int64, timeout time.Duration, match func(Record) bool) (Record, bool) {
	t.Helper()
	cl := k.clientFrom(t, topic, from)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for ctx.Err() == nil {
		var found *Record
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			if rec := toRecord(r); found == nil && match(rec) {
				found = &rec
			}
		})
		if found != nil {
			return *found, true
		}
	}
	return Record{}, false
}

// Consumer reads one topic from the start of every partition as records
// arrive. It is not safe for concurrent use.
type Consumer struct {
	cl    *kgo.Client
	buf   []Record
	close sync.Once
}

// Consumer starts reading topic from the start of every partition (with
// read_committed isolation) with an independent franz-go client. It is
// closed when the test ends.
func (k *TestKafka) Consumer(t testing.TB, topic string) *Consumer {
	t.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(k.Brokers...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(250*time.Millisecond),
	)
	if err != nil {
		t.Fatalf("testenv: kafka consumer: %v", err)
	}
	c := &Consumer{cl: cl}
	t.Cleanup(c.Close)
	return c
}

// Next returns the next record, waiting for one to arrive. It returns
// ctx.Err() when ctx ends first, or kgo.ErrClientClosed after Close.
// Transient fetch errors (e.g. the topic not existing yet) are retried.
func (c *Consumer) Next(ctx context.Context) (Record, error) {
	for len(c.buf) == 0 {
		fs := c.cl.PollFetches(ctx)
		if fs.IsClientClosed() {
			return Record{}, kgo.ErrClientClosed
		}
		if err := ctx.Err(); err != nil {
			return Record{}, err
		}
		fs.EachRecord(func(r *kgo.Record) { c.buf = append(c.buf, toRecord(r)) })
		if len(c.buf) == 0 {
			// Only errors came back: avoid a hot loop.
			select {
			case <-ctx.Done():
				return Record{}, ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	r := c.buf[0]
	c.buf = c.buf[1:]
	return r, nil
}

// Close stops the consumer's client. It is idempotent.
func (c *Consumer) Close() { c.close.Do(c.cl.Close) }

// KafkaCluster returns a new in-process kfake cluster of n brokers (node
// IDs 0 to n-1), each listening on 127.0.0.1 at a random port, closed when
// the test ends. Unlike Kafka it ignores OUTBOX_TEST_KAFKA_BROKERS: tests
// that need several brokers move partition leaders between them, which
// only the in-process cluster can do. Automatic topic creation is off
// (pass kfake.AllowAutoTopicCreation() to turn it on); create topics with
// Topic, whose partitions kfake spreads over the brokers. Extra kfake
// options are applied after kfake.NumBrokers(n).
func KafkaCluster(t testing.TB, n int, opts ...kfake.Opt) *TestKafka {
	t.Helper()
	if n < 1 {
		t.Fatalf("testenv: KafkaCluster: %d brokers", n)
	}
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(n)}, opts...)...)
	if err != nil {
		t.Fatalf("testenv: kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return &TestKafka{Brokers: c.ListenAddrs(), Cluster: c}
}

// MoveLeader makes the next broker (by node ID, wrapping around) the
// leader of topic's partition, as a leader election after a broker
// restart or a partition reassignment would, and returns the node IDs of
// the old and the new leader. kfake bumps the partition's leader epoch and
// answers produce requests sent to the old leader with
// NOT_LEADER_OR_FOLLOWER from then on; the cluster's metadata names the new
// leader as soon as MoveLeader returns. It fails the test when k has no
// in-process cluster, has a single broker, or lacks the partition.
func (k *TestKafka) MoveLeader(t testing.TB, topic string, partition int32) (from, to int32) {
	t.Helper()
	if k.Cluster == nil {
		t.Fatal("testenv: MoveLeader needs the in-process kfake cluster")
	}
	n := int32(len(k.Cluster.ListenAddrs()))
	if n < 2 {
		t.Fatal("testenv: MoveLeader needs at least 2 brokers")
	}
	from = k.Cluster.LeaderFor(topic, partition)
	if from < 0 {
		t.Fatalf("testenv: MoveLeader: %s/%d does not exist", topic, partition)
	}
	to = (from + 1) % n
	if err := k.Cluster.MoveTopicPartition(topic, partition, to); err != nil {
		t.Fatalf("testenv: move %s/%d to broker %d: %v", topic, partition, to, err)
	}
	return from, to
}
