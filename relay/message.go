package relay

import (
	"strings"

	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/kafka"
)

// message turns a row into a Kafka record: key aggregate ID, value the
// payload, headers event_id, event_type, aggregate_id and the row's own.
func (r *Relay) message(row *claim.Row) kafka.Message {
	h := make([]kafka.Header, 0, 3+len(row.Headers))
	h = append(h,
		kafka.Header{Key: "event_id", Value: []byte(row.ID)},
		kafka.Header{Key: "event_type", Value: []byte(row.EventType)},
		kafka.Header{Key: "aggregate_id", Value: []byte(row.AggregateID)},
	)
	for k, v := range row.Headers {
		if reservedHeader(k) || (r.cfg.IDHeader != "" && k == r.cfg.IDHeader) {
			// A plain-SQL writer's header must not override the event's
			// identity: consumers dedupe on event_id.
			continue
		}
		h = append(h, kafka.Header{Key: k, Value: []byte(v)})
	}
	if r.cfg.IDHeader != "" && r.cfg.IDHeader != "event_id" {
		h = append(h, kafka.Header{Key: r.cfg.IDHeader, Value: []byte(row.ID)})
	}
	return kafka.Message{Topic: r.topicOf(row), Key: []byte(row.AggregateID), Value: row.Payload, Headers: h}
}

// topicOf returns the row's destination: its topic column, else the
// TopicTemplate route, else Config.Topic.
func (r *Relay) topicOf(row *claim.Row) string {
	return route(row.Topic, row.AggregateType, r.cfg.TopicTemplate, r.cfg.Topic)
}

// route returns an event's destination topic as the relay computes it: the
// row's own topic column if set, else template with "${aggregatetype}" (or
// Debezium's "${routedByValue}") replaced by the aggregate type when both
// are set, else the relay's default topic. status and inspect use it to
// show where an event went.
func route(rowTopic, aggregateType, template, defaultTopic string) string {
	topic := rowTopic
	if topic == "" && template != "" && aggregateType != "" {
		topic = strings.NewReplacer("${aggregatetype}", aggregateType, "${routedByValue}", aggregateType).Replace(template)
	}
	if topic == "" {
		topic = defaultTopic
	}
	return topic
}

// reservedHeader reports whether k is one of the headers the relay sets
// from the row's columns.
func reservedHeader(k string) bool {
	return k == "event_id" || k == "event_type" || k == "aggregate_id"
}
