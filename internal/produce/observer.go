package produce

import (
	"sync/atomic"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	produceAPI "github.com/segmentio/kafka-go/protocol/produce"
	"go.uber.org/zap"
)

// Observer is told what the Publisher sees of the cluster, for metrics
// (outbox-relay's Prometheus metrics implement it). Its methods are called on the
// publishing path and must return quickly.
type Observer interface {
	// Produced reports one produce request to a broker: how long it took
	// to be answered (or to fail), and its error: nil when the broker
	// accepted every partition's records, else the transport's error or
	// the first partition's error code.
	Produced(d time.Duration, err error)
	// PartitionsChanged reports that topic's partition count, as the
	// cluster metadata says, changed from `from` to `to` while the
	// Publisher was writing to it. Keys then map to other partitions: the
	// events of an aggregate published before and after the change may be
	// on two partitions.
	PartitionsChanged(topic string, from, to int)
	// Resent reports that the idempotent producer (Idempotent) sends
	// batches again, as the same batches, after their outcome was unknown
	// or their leader moved: the broker writes each at most once.
	Resent(batches int)
}

// partitionWatch is the Writer's Balancer: the Java client's murmur2
// partitioner, which also notices when a topic's partition count changes
// (kafka-go passes the partitions of its current metadata to every
// Balance call). kafka-go calls Balance in the goroutine of WriteMessages,
// which the Publisher runs one at a time (Publisher.write), so it needs no
// lock.
type partitionWatch struct {
	inner kafkago.Balancer
	// counts is the last partition count seen per topic; last and lastN
	// skip the map for consecutive messages of one topic.
	counts map[string]int
	last   string
	lastN  int
	log    *zap.Logger
	obs    Observer
	// shared is a copy of counts that other goroutines read
	// (Publisher.PartitionOf), replaced only when a count changes.
	shared atomic.Pointer[map[string]int]
}

func newPartitionWatch(log *zap.Logger, obs Observer) *partitionWatch {
	return &partitionWatch{inner: kafkago.Murmur2Balancer{Consistent: true}, counts: map[string]int{}, log: log, obs: obs}
}

// Balance implements kafka-go's Balancer.
func (w *partitionWatch) Balance(msg kafkago.Message, partitions ...int) int {
	if n := len(partitions); n != w.lastN || msg.Topic != w.last {
		w.seen(msg.Topic, n)
	}
	return w.inner.Balance(msg, partitions...)
}

func (w *partitionWatch) seen(topic string, n int) {
	w.last, w.lastN = topic, n
	prev, ok := w.counts[topic]
	w.counts[topic] = n
	if !ok || prev != n {
		w.share()
	}
	if !ok || prev == n || n == 0 || prev == 0 {
		return
	}
	w.log.Warn("topic's partition count changed: aggregate IDs map to other partitions from now on, so an aggregate's events "+
		"published before and after the change are on two partitions and may be consumed out of order",
		zap.String("topic", topic), zap.Int("partitions_before", prev), zap.Int("partitions", n))
	if w.obs != nil {
		w.obs.PartitionsChanged(topic, prev, n)
	}
}

// share publishes a copy of counts for partitions.
func (w *partitionWatch) share() {
	m := make(map[string]int, len(w.counts))
	for t, n := range w.counts {
		m[t] = n
	}
	w.shared.Store(&m)
}

// partitions returns topic's partition count as the last message for it
// saw, or 0 before any. Safe for concurrent use.
func (w *partitionWatch) partitions(topic string) int {
	if m := w.shared.Load(); m != nil {
		return (*m)[topic]
	}
	return 0
}

// produceOutcome returns the error of a produce round trip: the
// transport's, or the first partition's error code.
func produceOutcome(resp kafkago.Response, err error) error {
	if err != nil {
		return err
	}
	pr, ok := resp.(*produceAPI.Response)
	if !ok {
		return nil
	}
	for _, t := range pr.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != 0 {
				return kafkago.Error(p.ErrorCode)
			}
		}
	}
	return nil
}
