package produce

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/pgoutbox/outbox/kafka"

	kafkago "github.com/segmentio/kafka-go"
	metadataAPI "github.com/segmentio/kafka-go/protocol/metadata"
)

// PartitionError is a per-message error of a Publish call for a condition
// of the message's partition, with what the cluster metadata said about
// that partition when the error came back: which broker leads it and
// which replicas are in sync. It says which broker to look at when a
// partition has too few in-sync replicas, no leader, or a leader that
// times out. It unwraps to the broker's error, so classify sees that.
type PartitionError struct {
	// Topic and Partition are the message's.
	Topic     string
	Partition int32
	// Leader is the leader's node ID (-1: none) and Broker its address,
	// host:port ("" when unknown).
	Leader int32
	Broker string
	// Replicas and ISR are the partition's replica and in-sync replica
	// node IDs.
	Replicas, ISR []int32
	// Err is the broker's (or kafka-go's) error.
	Err error
}

// Error reads like "payments/3 (leader 2 at 127.0.0.1:9093, in-sync
// replicas [2] of [1 2 3]): [19] Not Enough Replicas".
func (e *PartitionError) Error() string {
	leader := "no leader"
	if e.Leader >= 0 {
		leader = "leader " + strconv.Itoa(int(e.Leader))
		if e.Broker != "" {
			leader += " at " + e.Broker
		}
	}
	return fmt.Sprintf("%s/%d (%s, in-sync replicas %v of %v): %s", e.Topic, e.Partition, leader, e.ISR, e.Replicas, shortError(e.Err))
}

// Unwrap returns Err.
func (e *PartitionError) Unwrap() error { return e.Err }

// partitionInfo is one topic's partitions, as describe read them.
type partitionInfo struct {
	at         time.Time
	partitions []kafkago.Partition // by partition index
}

// describer reads and briefly caches topic metadata to explain the errors
// of a failed publish, on a connection of its own: the Writer's transport
// answers metadata requests from a cache that may be seconds old, with no
// way to bypass it (transport.go connPool.roundTrip; kafka-go #1374). It
// runs only when a publish fails for a condition of the cluster.
type describer struct {
	// read asks broker for topic's partitions (Publisher.readPartitions).
	read    func(ctx context.Context, broker, topic string) ([]kafkago.Partition, error)
	brokers []string
	timeout time.Duration

	mu    sync.Mutex
	cache map[string]*partitionInfo
}

// describeTTL bounds how old the metadata that explains an error may be:
// during an outage many calls fail within a second, and one metadata
// request explains them all.
const describeTTL = time.Second

// describeTimeout bounds the metadata request that explains a failed
// publish; it adds to that publish's duration.
const describeTimeout = 2 * time.Second

// topic returns topic's partitions, from the first broker that answers
// within the describer's timeout. A failure is remembered for describeTTL
// too (no partitions), so that while the cluster is down every failed
// publish does not wait for it again.
func (d *describer) topic(ctx context.Context, topic string) (*partitionInfo, error) {
	d.mu.Lock()
	info := d.cache[topic]
	d.mu.Unlock()
	if info != nil && time.Since(info.at) < describeTTL {
		return info, nil
	}
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	var errs []error
	for _, b := range d.brokers {
		parts, err := d.read(ctx, b, topic)
		if err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		info = &partitionInfo{at: time.Now(), partitions: make([]kafkago.Partition, len(parts))}
		for _, p := range parts {
			if p.ID >= 0 && p.ID < len(parts) {
				info.partitions[p.ID] = p
			}
		}
		d.remember(topic, info)
		return info, nil
	}
	d.remember(topic, &partitionInfo{at: time.Now()})
	return nil, errors.Join(errs...)
}

func (d *describer) remember(topic string, info *partitionInfo) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cache == nil {
		d.cache = map[string]*partitionInfo{}
	}
	d.cache[topic] = info
}

// readPartitions asks broker for topic's partitions with a Metadata
// request that never asks the broker to create the topic, on a fresh
// kafka-go Transport (as CheckTopics asks: its discover request is for
// exactly this topic, allow_auto_topic_creation false). Not kafka-go's
// Conn.ReadPartitions, which always sets allow_auto_topic_creation
// (conn.go Conn.ReadPartitions, Metadata v6; v1 creates implicitly; no
// kafka-go issue): on a broker with auto.create.topics.enable (Kafka's
// default) it would create a deleted topic again.
func (p *Publisher) readPartitions(ctx context.Context, broker, topic string) ([]kafkago.Partition, error) {
	t := p.newTransport(p.dialer.dialConn, []string{topic})
	defer t.CloseIdleConnections()
	r, err := t.RoundTrip(ctx, kafkago.TCP(broker), &metadataAPI.Request{TopicNames: []string{topic}})
	if err != nil {
		return nil, p.explain("", err)
	}
	resp, ok := r.(*metadataAPI.Response)
	if !ok {
		return nil, fmt.Errorf("unexpected metadata response %T", r)
	}
	brokers := make(map[int32]kafkago.Broker, len(resp.Brokers))
	for _, b := range resp.Brokers {
		brokers[b.NodeID] = kafkago.Broker{ID: int(b.NodeID), Host: b.Host, Port: int(b.Port), Rack: b.Rack}
	}
	node := func(id int32) kafkago.Broker {
		if b, ok := brokers[id]; ok {
			return b
		}
		return kafkago.Broker{ID: int(id)}
	}
	for _, rt := range resp.Topics {
		if rt.Name != topic {
			continue
		}
		if rt.ErrorCode != 0 {
			return nil, fmt.Errorf("topic %q: %w", topic, kafkago.Error(rt.ErrorCode))
		}
		parts := make([]kafkago.Partition, 0, len(rt.Partitions))
		for _, rp := range rt.Partitions {
			part := kafkago.Partition{Topic: topic, ID: int(rp.PartitionIndex), Leader: node(rp.LeaderID)}
			for _, id := range rp.ReplicaNodes {
				part.Replicas = append(part.Replicas, node(id))
			}
			for _, id := range rp.IsrNodes {
				part.Isr = append(part.Isr, node(id))
			}
			parts = append(parts, part)
		}
		return parts, nil
	}
	return nil, fmt.Errorf("topic %q: %w", topic, kafkago.UnknownTopicOrPartition)
}

// explainPartitions wraps each per-message error of errs (one per msgs
// entry, all for topic) that is a Kafka error code of an outage in a
// *PartitionError naming the partition's leader and replicas. Errors it
// cannot explain (no broker answered, the topic has no partitions) are
// left as they are.
func (p *Publisher) explainPartitions(ctx context.Context, topic string, msgs []kafka.Message, errs []error) {
	var info *partitionInfo
	tried := false
	for i, err := range errs {
		var ke kafkago.Error
		if err == nil || !errors.As(err, &ke) || !IsOutage(err) {
			continue
		}
		if !tried {
			tried = true
			info, _ = p.describe.topic(context.WithoutCancel(ctx), topic)
		}
		if info == nil || len(info.partitions) == 0 {
			return
		}
		part := info.partitions[Partition(msgs[i].Key, len(info.partitions))]
		pe := &PartitionError{Topic: topic, Partition: int32(part.ID), Leader: int32(part.Leader.ID), Err: err}
		if part.Leader.Host != "" {
			pe.Broker = net.JoinHostPort(part.Leader.Host, strconv.Itoa(part.Leader.Port))
		} else {
			pe.Leader = -1
		}
		for _, r := range part.Replicas {
			pe.Replicas = append(pe.Replicas, int32(r.ID))
		}
		for _, r := range part.Isr {
			pe.ISR = append(pe.ISR, int32(r.ID))
		}
		errs[i] = pe
	}
}
