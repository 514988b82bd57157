package kafka

// Header is one Kafka record header. Values may be nil.
type Header struct {
	Key   string
	Value []byte
}

// Message is one record to publish.
type Message struct {
	// Topic to publish to; "" means Config.Topic.
	Topic string
	// Key is the record key, the aggregate ID; it selects the partition (see
	// Partition). nil is a null key.
	Key []byte
	// Value is the payload (JSON); nil is a Kafka null value (a tombstone on
	// compacted topics).
	Value []byte
	// Headers are sent in this order. The relay puts event_id, event_type and
	// aggregate_id first, then the row's own headers.
	Headers []Header
}
