package relay

import (
	"slices"
	"strings"
	"time"

	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/kafka"
	"github.com/pgoutbox/outbox/kafka/format"
)

// message turns a row into a Kafka record: key aggregate ID, value the
// payload, headers event_id, event_type, aggregate_id, the CloudEvents
// ones (Config.Format.CloudEvents) and the row's own. The value is encoded
// in its schema later, by the publisher (Config.Format.Value).
func (r *Relay) message(row *claim.Row) kafka.Message {
	ce := r.cfg.Format.CloudEvents
	n := 3 + len(row.Headers)
	if ce {
		n += len(cloudEventsHeaders) + 1
	}
	h := make([]kafka.Header, 0, n)
	h = append(h,
		kafka.Header{Key: "event_id", Value: []byte(row.ID)},
		kafka.Header{Key: "event_type", Value: []byte(row.EventType)},
		kafka.Header{Key: "aggregate_id", Value: []byte(row.AggregateID)},
	)
	if ce {
		h = r.cloudEvents(h, row)
	}
	for k, v := range row.Headers {
		if reservedHeader(k) || (r.cfg.IDHeader != "" && k == r.cfg.IDHeader) || (ce && cloudEventsHeader(k)) {
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

// cloudEventsHeaders are the headers Config.Format.CloudEvents sets
// (binary content mode of the CloudEvents Kafka binding), besides
// ce_dataschema, which the schema's encoder sets.
var cloudEventsHeaders = []string{"ce_specversion", "ce_id", "ce_source", "ce_type", "ce_time", "ce_subject", "content-type"}

// contentTypes is the content-type of each value format.
var contentTypes = map[format.Value]string{
	format.ValueJSON:       "application/json",
	format.ValueAvro:       "application/avro",
	format.ValueProtobuf:   "application/protobuf",
	format.ValueJSONSchema: "application/json",
}

// cloudEvents appends the CloudEvents headers of row to h.
func (r *Relay) cloudEvents(h []kafka.Header, row *claim.Row) []kafka.Header {
	f := &r.cfg.Format
	h = append(h,
		kafka.Header{Key: "ce_specversion", Value: []byte("1.0")},
		kafka.Header{Key: "ce_id", Value: []byte(row.ID)},
		kafka.Header{Key: "ce_source", Value: []byte(f.CloudEventsSource)},
		kafka.Header{Key: "ce_type", Value: []byte(row.EventType)},
		kafka.Header{Key: "ce_time", Value: []byte(row.CreatedAt.UTC().Format(time.RFC3339Nano))},
		kafka.Header{Key: "ce_subject", Value: []byte(row.AggregateID)},
	)
	if row.Payload != nil {
		// A tombstone has no data, hence no content type.
		h = append(h, kafka.Header{Key: "content-type", Value: []byte(contentTypes[f.Value])})
	}
	return h
}

// cloudEventsHeader reports whether the relay sets header k with
// Config.Format.CloudEvents: a row's own header of that name is replaced.
func cloudEventsHeader(k string) bool {
	return k == "ce_dataschema" || slices.Contains(cloudEventsHeaders, k)
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
