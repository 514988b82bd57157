// Package kafka configures how the relay publishes to Kafka: the brokers,
// security, topic, batching and retry settings of relay.ServiceConfig.Kafka.
// The publisher itself (segmentio/kafka-go's Writer, the classification of
// its errors) is internal to the module; Message and Header are the records
// it publishes, as outboxtest.Publisher records them.
package kafka

import (
	"net"
	"strings"
	"time"

	"github.com/pgoutbox/outbox/internal/config"
)

// Defaults applied by NewPublisher to zero-valued Config fields.
const (
	// DefaultClientID is the Kafka client.id sent to brokers.
	DefaultClientID = "pgoutbox"

	// DefaultBatchTimeout is how long kafka-go waits for more messages
	// before sending a partially filled partition batch: the smallest
	// positive duration (0 would mean kafka-go's 1s, which every synchronous
	// call waits out: kafka-go #1180). See Config.BatchTimeout.
	DefaultBatchTimeout = time.Nanosecond

	// DefaultBatchSize is the maximum number of messages per produce request
	// per partition, and the largest Publish call that is sent as one request
	// per partition.
	DefaultBatchSize = 1000

	// DefaultBatchBytes is Kafka's default broker/topic message.max.bytes
	// (1048588 since Kafka 0.11, rounded down to 1 MiB), see
	// https://kafka.apache.org/documentation/#brokerconfigs_message.max.bytes.
	DefaultBatchBytes = 1 << 20

	// DefaultWriteTimeout bounds one produce attempt. The relay requires
	// the Publisher's AttemptBudget to be at most half its lease (default
	// 30s, lease.DefaultLease), so that one publish cannot outlive the
	// claim of its rows: DefaultMaxAttempts (3) attempts of 4s take 12s,
	// and kafka-go's backoffs before the second and third attempt add
	// 100ms and 400ms, so AttemptBudget is 12.5s with the defaults. A
	// healthy broker answers a produce request in milliseconds; 4s leaves
	// room for a slow acks=all round with a lagging follower.
	DefaultWriteTimeout = 4 * time.Second

	// DefaultDialTimeout bounds establishing one broker connection
	// (Config.DialTimeout says what it covers); it is kafka-go's default.
	DefaultDialTimeout = 5 * time.Second

	// DefaultMetadataTTL is kafka-go's Transport default for refreshing
	// cached cluster metadata.
	DefaultMetadataTTL = 6 * time.Second

	// DefaultMaxAttempts is the number of produce attempts kafka-go makes
	// per batch for retriable errors before giving up.
	DefaultMaxAttempts = 3

	// DefaultTransactionalIDPrefix starts every relay's transactional ID
	// with Config.Fence (see Config.TransactionalIDPrefix).
	DefaultTransactionalIDPrefix = "pgoutbox/"
)

// SASLMechanism is Config.SASLMechanism: "" (no SASL) or one of the
// constants below, matched without regard to case.
type SASLMechanism string

// SASL mechanism names accepted in Config.SASLMechanism.
const (
	SASLPlain       SASLMechanism = "PLAIN"
	SASLScramSHA256 SASLMechanism = "SCRAM-SHA-256"
	SASLScramSHA512 SASLMechanism = "SCRAM-SHA-512"
)

// Compression is Config.Compression: a record batch codec, matched without
// regard to case.
type Compression string

// Compression codecs.
const (
	CompressionNone   Compression = "none"
	CompressionGzip   Compression = "gzip"
	CompressionSnappy Compression = "snappy"
	CompressionLz4    Compression = "lz4"
	CompressionZstd   Compression = "zstd"
)

// Config configures a Publisher. The zero value of every field except Brokers
// means "use the default"; each field documents its default. Fields are plain
// types so that they map one-to-one to command-line flags.
//
// The producer always uses acks=all (kafka-go's RequireAll): a message counts
// as delivered only once every in-sync replica has it. This is not
// configurable on purpose: the zero value of kafka-go's Writer.RequiredAcks is
// RequireNone (fire and forget), which would silently break at-least-once
// delivery.
type Config struct {
	// Brokers lists bootstrap brokers as host:port. Required; no default.
	Brokers []string

	// Topic is the topic for messages whose Message.Topic is empty.
	// Defaults to "" (every message must then name its topic).
	Topic string

	// ClientID is the Kafka client.id. Defaults to "pgoutbox".
	ClientID string

	// BatchTimeout is how long kafka-go waits for more messages before
	// sending a partially filled partition batch. In kafka-go's synchronous
	// mode a batch that is not full is only sent when this timer fires
	// (kafka-go's own default is 1s), so it is pure added latency for every
	// Publish. A tiny value never splits one Publish call (kafka-go v0.4.51
	// writer.go: partitionWriter.writeMessages appends all of one call's
	// messages for a partition while holding the partition writer's mutex,
	// and awaitBatch, which flushes on the timer, takes the same mutex).
	// Larger values only let concurrent Publish calls share a request, and
	// sub-millisecond values are not what they seem: an idle Go runtime
	// sleeps in epoll_wait with millisecond resolution, so a 100µs timer
	// fires after about 1ms. Defaults to 1ns (flush as soon as the call's
	// messages are queued). Not used with Idempotent, which sends each
	// call's messages at once.
	BatchTimeout time.Duration

	// BatchSize is the maximum number of messages in one produce request for
	// one partition (kafka-go's Writer.BatchSize). Publish calls with more
	// messages are split into sequential sub-calls. kafka-go allocates a
	// BatchSize-capacity slice of messages (152 bytes each) for every
	// partition batch, even a one-message one; the Publisher therefore
	// sets kafka-go's BatchSize to each sub-call's length, so this bounds
	// memory per call only. Defaults to 1000.
	BatchSize int

	// BatchBytes is the maximum size in bytes of one partition's batch as
	// kafka-go counts it (kafka-go's Writer.BatchBytes); a single message
	// larger than this fails with a permanent error. Keep it at or below the
	// broker's message.max.bytes / topic max.message.bytes.
	// Defaults to 1048576 (Kafka's default message.max.bytes, 1 MiB).
	BatchBytes int64

	// WriteTimeout bounds one produce attempt (request and acknowledgement).
	// Defaults to 4s (DefaultWriteTimeout). See Publisher.AttemptBudget.
	WriteTimeout time.Duration

	// DialTimeout bounds connecting to one broker: TCP connect, TLS
	// handshake and, for the Writer's connections, the ApiVersions round
	// trip. kafka-go v0.4.51 (transport.go connGroup.connect) clears the
	// deadline before the SASL round trips: a broker that stalls there is
	// bounded by the publish call's deadline instead. Defaults to 5s.
	DialTimeout time.Duration

	// MetadataTTL is how often cached cluster metadata (partition counts,
	// leaders) is refreshed: kafka-go refreshes at random intervals below it.
	// A produce request that fails because a partition's leader moved, or
	// with a network error, refreshes it at once regardless (see Publish).
	// Defaults to 6s.
	MetadataTTL time.Duration

	// MaxAttempts is how many times kafka-go tries a produce request that
	// fails with a retriable error before reporting it. Keep it small: the
	// relay retries with its own backoff. Defaults to 3.
	MaxAttempts int

	// Compression is the batch compression codec: "none", "gzip", "snappy",
	// "lz4" or "zstd". Defaults to "none".
	Compression Compression

	// Idempotent sends every record batch with a producer ID and a
	// sequence per partition (Kafka's idempotent producer, KIP-98, as the
	// Java producer's enable.idempotence): a batch sent again after a
	// timeout, a lost connection or a leader move is written once, not
	// twice. It needs Kafka 0.11 or later and, on clusters with ACLs
	// older than 2.8, the IdempotentWrite permission. Defaults to false
	// (kafka-go's Writer, whose retries may write a second copy), so that
	// an upgrade does not change a library user's producer; outbox-relay
	// run sets it (--kafka-idempotent, true by default).
	Idempotent bool

	// Fence makes the brokers refuse the writes of a relay whose key
	// partitions moved to another (paused past its lease, say, with a
	// produce request still on its way): each relay writes every batch in
	// a Kafka transaction under transactional IDs of its own
	// (TransactionalIDPrefix and its member name), and a relay that takes
	// key partitions over from a member whose membership ended first bumps
	// that member's epoch (Kafka's producer fencing, KIP-98), so records
	// of an aggregate never lie in the log after later events of it. It
	// needs Idempotent, Kafka 3.0 or later (3.6 or later to refuse a
	// request on its way after its transaction ended), WRITE and DESCRIBE
	// on the transactional IDs with ACLs, and consumers that read with
	// isolation.level=read_committed to skip the aborted copies. It costs
	// two round trips to the transaction coordinator per produce call.
	// Defaults to false.
	Fence bool

	// TransactionalIDPrefix starts the transactional IDs of every relay
	// with Fence; the relay's member name and "/0" or "/1" follow (two
	// IDs, used in turn). Relays of different
	// outbox tables or databases that share a Kafka cluster need
	// different prefixes. Defaults to DefaultTransactionalIDPrefix
	// followed by the outbox table's name and "/" (relay.NewService).
	TransactionalIDPrefix string

	// AutoCreateTopic lets metadata requests create missing topics on
	// brokers that allow it (auto.create.topics.enable); it applies to
	// Publish and CheckTopics. Defaults to false.
	AutoCreateTopic bool

	// TLSEnabled turns on TLS to brokers. The handshake is bounded by
	// DialTimeout; a listener that answers plaintext Kafka instead is
	// recognized about 250ms into the handshake (see ErrTLS). Defaults to
	// false.
	TLSEnabled bool
	// TLSCAFile is a PEM file of CAs to verify brokers with.
	// Defaults to "" (system roots). Requires TLSEnabled.
	TLSCAFile string
	// TLSCertFile is a PEM client certificate for mutual TLS.
	// Defaults to "" (none). Requires TLSEnabled and TLSKeyFile.
	TLSCertFile string
	// TLSKeyFile is the PEM private key for TLSCertFile.
	// Defaults to "" (none). Requires TLSEnabled and TLSCertFile.
	TLSKeyFile string
	// TLSInsecureSkipVerify disables broker certificate verification.
	// Defaults to false. Requires TLSEnabled.
	TLSInsecureSkipVerify bool

	// SASLMechanism is "", "PLAIN", "SCRAM-SHA-256" or "SCRAM-SHA-512".
	// Defaults to "" (no SASL).
	SASLMechanism SASLMechanism
	// SASLUsername is the SASL user. Defaults to "". Required with a
	// SASLMechanism.
	SASLUsername string
	// SASLPassword is the SASL password. Defaults to "".
	SASLPassword string

	// Observer, if set, is told every produce request's duration and
	// outcome and every change of a topic's partition count (not a flag:
	// outbox-relay sets its metrics here). Defaults to nil.
	Observer interface {
		// Produced reports one produce request to a broker: how long it
		// took to be answered (or to fail), and its error: nil when the
		// broker accepted every partition's records, else the transport's
		// error or the first partition's error code.
		Produced(d time.Duration, err error)
		// PartitionsChanged reports that topic's partition count, as the
		// cluster metadata says, changed from `from` to `to` while
		// publishing to it. Keys then map to other partitions: the events
		// of an aggregate published before and after the change may be on
		// two partitions.
		PartitionsChanged(topic string, from, to int)
		// Resent reports that the idempotent producer (Idempotent) sends
		// batches again, as the same batches, after their outcome was unknown
		// or their leader moved: the broker writes each at most once.
		Resent(batches int)
	}
}

// compressionNames are the accepted Config.Compression values.
var compressionNames = []Compression{"", CompressionNone, CompressionGzip, CompressionSnappy, CompressionLz4, CompressionZstd}

func fieldErr(field, format string, args ...any) error {
	return config.Invalid("kafka", field, format, args...)
}

// Validate returns a *outbox.FieldError ("kafka: Config.<Field>: <reason>")
// naming the first invalid field; c is not changed. Zero values are valid
// (they mean the default) except for Brokers, which is required.
func (c Config) Validate() error {
	if len(c.Brokers) == 0 {
		return fieldErr("Brokers", "empty")
	}
	for i, b := range c.Brokers {
		host, port, err := net.SplitHostPort(b)
		if err != nil || host == "" || port == "" {
			return fieldErr("Brokers", "entry %d %q: want host:port", i, b)
		}
	}
	if strings.TrimSpace(c.Topic) != c.Topic {
		return fieldErr("Topic", "%q has surrounding spaces", c.Topic)
	}
	if c.BatchTimeout < 0 {
		return fieldErr("BatchTimeout", "negative")
	}
	if c.BatchSize < 0 {
		return fieldErr("BatchSize", "negative")
	}
	if c.BatchBytes < 0 {
		return fieldErr("BatchBytes", "negative")
	}
	if c.WriteTimeout < 0 {
		return fieldErr("WriteTimeout", "negative")
	}
	if c.DialTimeout < 0 {
		return fieldErr("DialTimeout", "negative")
	}
	if c.MetadataTTL < 0 {
		return fieldErr("MetadataTTL", "negative")
	}
	if c.MaxAttempts < 0 {
		return fieldErr("MaxAttempts", "negative")
	}
	okComp := false
	for _, n := range compressionNames {
		if Compression(strings.ToLower(string(c.Compression))) == n {
			okComp = true
		}
	}
	if !okComp {
		return fieldErr("Compression", "%q: want none, gzip, snappy, lz4 or zstd", c.Compression)
	}
	if c.Fence && !c.Idempotent {
		return fieldErr("Fence", "needs Config.Idempotent: fencing is by the idempotent producer's epoch")
	}
	if !c.TLSEnabled {
		switch {
		case c.TLSCAFile != "":
			return fieldErr("TLSCAFile", "set without Config.TLSEnabled")
		case c.TLSCertFile != "":
			return fieldErr("TLSCertFile", "set without Config.TLSEnabled")
		case c.TLSKeyFile != "":
			return fieldErr("TLSKeyFile", "set without Config.TLSEnabled")
		case c.TLSInsecureSkipVerify:
			return fieldErr("TLSInsecureSkipVerify", "set without Config.TLSEnabled")
		}
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		if c.TLSCertFile == "" {
			return fieldErr("TLSCertFile", "empty but Config.TLSKeyFile is set")
		}
		return fieldErr("TLSKeyFile", "empty but Config.TLSCertFile is set")
	}
	switch SASLMechanism(strings.ToUpper(string(c.SASLMechanism))) {
	case "":
		if c.SASLUsername != "" || c.SASLPassword != "" {
			return fieldErr("SASLMechanism", "empty but SASL credentials are set")
		}
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		if c.SASLUsername == "" {
			return fieldErr("SASLUsername", "empty with Config.SASLMechanism %s", c.SASLMechanism)
		}
	default:
		return fieldErr("SASLMechanism", "%q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", c.SASLMechanism)
	}
	return nil
}

// WithDefaults returns a copy of c with every zero field set to its
// default.
func (c Config) WithDefaults() Config {
	c.Brokers = append([]string(nil), c.Brokers...)
	if c.ClientID == "" {
		c.ClientID = DefaultClientID
	}
	if c.BatchTimeout == 0 {
		c.BatchTimeout = DefaultBatchTimeout
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.BatchBytes == 0 {
		c.BatchBytes = DefaultBatchBytes
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.MetadataTTL == 0 {
		c.MetadataTTL = DefaultMetadataTTL
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	c.Compression = Compression(strings.ToLower(string(c.Compression)))
	if c.Compression == "" {
		c.Compression = CompressionNone
	}
	c.SASLMechanism = SASLMechanism(strings.ToUpper(string(c.SASLMechanism)))
	return c
}
