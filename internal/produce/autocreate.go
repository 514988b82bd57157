package produce

import (
	"context"
	"errors"
	"time"

	"github.com/pgoutbox/outbox/kafka"

	kafkago "github.com/segmentio/kafka-go"
)

// publishOneTopic publishes msgs, all for one topic. With
// Config.AutoCreateTopic, a call whose every message failed because the
// topic is unknown waits for the broker to create it (CheckTopics asks it
// to, and waits up to 3 s while it is being created) and sends once more:
// Kafka answers UNKNOWN_TOPIC_OR_PARTITION while it creates a topic, which
// is the normal first publish to a new topic, not a failure. kafka-go's
// Writer fails the call with that code instead of waiting: it waits only
// for a topic the broker reported without an error (transport.go
// connPool.roundTrip, kafka-go #806; writer.go Writer.partitions).
func (p *Publisher) publishOneTopic(ctx context.Context, msgs []kafka.Message) error {
	err := p.publishOneTopicOnce(ctx, msgs)
	if err == nil || !p.cfg.AutoCreateTopic || !noneSentForUnknownTopic(err) {
		return err
	}
	topic := msgs[0].Topic
	if topic == "" {
		topic = p.cfg.Topic
	}
	now := time.Now()
	if last, ok := p.createAsked.Load(topic); ok && now.Sub(last.(time.Time)) < createRetryAfter {
		return err
	}
	p.createAsked.Store(topic, now)
	if cerr := p.CheckTopics(ctx, topic); cerr != nil {
		return err
	}
	p.createAsked.Delete(topic)
	return p.publishOneTopicOnce(ctx, msgs)
}

// createRetryAfter is how long publishOneTopic goes without waiting again
// for the broker to create a topic it did not create.
const createRetryAfter = 30 * time.Second

// noneSentForUnknownTopic reports whether err says that no message of a
// call was sent and that the topic was unknown: for every message, the
// topic was unknown or it was not attempted.
func noneSentForUnknownTopic(err error) bool {
	var pe *PublishError
	if !errors.As(err, &pe) {
		return errors.Is(err, kafkago.UnknownTopicOrPartition)
	}
	unknown := false
	for _, e := range pe.Errs {
		switch {
		case e == nil:
			return false
		case errors.Is(e, kafkago.UnknownTopicOrPartition):
			unknown = true
		case !errors.Is(e, ErrNotAttempted):
			return false
		}
	}
	return unknown
}
