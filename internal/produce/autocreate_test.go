package produce

import (
	"context"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/kafka"
)

// With AutoCreateTopic, the first Publish to a topic the broker has not
// created yet succeeds: the broker answers UNKNOWN_TOPIC_OR_PARTITION while
// it creates it (Kafka 4.x), and Publish waits for the topic and sends
// again, instead of failing the call (which the relay logged as a Kafka
// outage for every new routed topic).
func TestPublishToATopicTheBrokerCreates(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, topic := newBroker(t, 1)
	p := newTestPublisher(t, kafka.Config{Brokers: b.addrs, Topic: topic, AutoCreateTopic: true})
	for i, fresh := range []string{topic + "-new-a", topic + "-new-b"} {
		start := time.Now()
		err := p.Send(ctx, []kafka.Message{{Topic: fresh, Key: []byte("k"), Value: []byte(`{"n":1}`)}, {Topic: fresh, Key: []byte("k"), Value: []byte(`{"n":2}`)}})
		if err != nil {
			t.Fatalf("first Publish to %s (AutoCreateTopic) = %v, want nil", fresh, err)
		}
		t.Logf("topic %d created and published to in %v", i, time.Since(start).Round(time.Millisecond))
		if !topicExists(t, b.addrs, fresh) {
			t.Errorf("%s not created", fresh)
		}
	}
}
