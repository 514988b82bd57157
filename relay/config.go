// Package relay is the outbox relay's engine: woken by a notification
// (package notify), by a jittered poll ticker, or at once while claims come
// back full, it claims a batch of outbox rows (package lease), publishes
// them to Kafka (package kafka) outside any database transaction, and marks
// the delivered rows published.
//
// Three goroutines form a pipeline, each holding at most one batch, so
// memory is bounded by about three batches: the claimer claims batch N+1
// while the publisher publishes batch N and the marker marks batch N-1.
//
// Guarantees: at-least-once delivery (a row is marked only after Kafka
// acknowledged it with acks=all; a crash in between publishes it again, with
// the same event_id), and per-aggregate order: an event is never published
// before an earlier event (by seq) of its aggregate. If an event fails, the
// later events of its aggregate are neither published nor marked until it
// succeeds, while other aggregates go on.
package relay

import (
	"fmt"
	"strings"
	"time"

	"github.com/pgoutbox/outbox"
)

// Config configures a Relay. Durations are wall-clock durations; all lease
// arithmetic itself is done by the database clock (package lease).
type Config struct {
	// Topic is the Kafka topic for rows whose topic column is NULL. Required
	// unless every row names its topic.
	Topic string
	// TopicTemplate routes each event to a topic computed from its row, as
	// Debezium's Outbox Event Router does with route.topic.replacement:
	// "${aggregatetype}" (or Debezium's "${routedByValue}") is replaced by
	// the row's aggregate type column (lease.Columns.AggregateType). A
	// row's own topic column still wins; Topic is used when the template
	// gives an empty value. Defaults to "" (no routing).
	TopicTemplate string
	// IDHeader, if set, also carries the event ID in a header of this name
	// (Debezium's router uses "id"), besides event_id. Defaults to "".
	IDHeader string
	// PollInterval is the fallback poll: with no notification for this long,
	// the relay claims anyway (events from writers that do not notify, and
	// notifications lost while the listener reconnects). Jittered by ±10%.
	// Defaults to 500ms.
	PollInterval time.Duration
	// Linger is how long the relay keeps looking after a claim that found
	// events: it claims again every LingerPoll (doubling up to 4×LingerPoll
	// while claims come back empty) until Linger has passed without an
	// event. Writers in the default outbox.WakeupDebounced mode notify once
	// per WakeupInterval (20ms) per process; the events committed inside
	// that window carry no notification and are found by these claims, so
	// Linger must be at least the writers' WakeupInterval. Defaults to
	// 25ms; negative disables lingering (then use outbox.WakeupEveryTx).
	// A relay without notifications (New with a nil wake channel) never
	// lingers: it polls every PollInterval.
	Linger time.Duration
	// LingerPoll is the interval between lingering claims while events
	// arrive at less than one per LingerPoll (2,000/s by default, averaged
	// over 50ms); above that rate the relay is busy and lingers every
	// 40×LingerPoll (20ms), taking bigger batches instead of claiming more
	// often. After an empty claim the gap doubles, up to 4×LingerPoll.
	// Defaults to 500µs.
	LingerPoll time.Duration
	// MaxAttempts is how many failed publishes, each answered by the broker
	// with an error, an event may have before it is dead-lettered. Failures
	// where the broker was not reached (network errors, timeouts) do not
	// count: an outage is not a poison event. Defaults to 16 (about 10
	// minutes with the default retry delays). Errors that no retry can fix
	// (kafka.IsRecordRejected, e.g. MESSAGE_TOO_LARGE) dead-letter at once.
	MaxAttempts int
	// OnDeadLetter says what happens to the later events of a dead-lettered
	// event's aggregate: "hold" keeps them unpublished until the dead letter
	// is requeued, so per-aggregate order is kept; "skip" publishes them,
	// giving up order for that aggregate. Defaults to "hold".
	OnDeadLetter string
	// RetryMin is the delay before a failed event is retried; it doubles
	// per failed attempt of that event, with ±20% jitter, up to RetryMax.
	// Defaults to 500ms.
	RetryMin time.Duration
	// RetryMax caps the retry delay. Defaults to 1m.
	RetryMax time.Duration
	// ShutdownTimeout bounds a graceful stop: after the context given to
	// Run is done, the in-flight publish may take this long; then delivered
	// rows are marked, the rest released, and Run returns. Defaults to 10s.
	ShutdownTimeout time.Duration
	// DBTimeout bounds each claim, mark and release statement. Defaults to
	// 10s.
	DBTimeout time.Duration
}

// Config.OnDeadLetter values.
const (
	DeadLetterHold = "hold"
	DeadLetterSkip = "skip"
)

// DefaultLinger is Config.Linger's default: a little more than the writers'
// default outbox.WriterConfig.WakeupInterval (20ms).
const DefaultLinger = 25 * time.Millisecond

func (c *Config) setDefaults() {
	if c.PollInterval == 0 {
		c.PollInterval = 500 * time.Millisecond
	}
	if c.Linger == 0 {
		c.Linger = DefaultLinger
	}
	if c.LingerPoll == 0 {
		c.LingerPoll = 500 * time.Microsecond
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 16
	}
	if c.OnDeadLetter == "" {
		c.OnDeadLetter = DeadLetterHold
	}
	if c.RetryMin == 0 {
		c.RetryMin = 500 * time.Millisecond
	}
	if c.RetryMax == 0 {
		c.RetryMax = time.Minute
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 10 * time.Second
	}
	if c.DBTimeout == 0 {
		c.DBTimeout = 10 * time.Second
	}
}

// Validate applies defaults and returns an error naming the first invalid
// field.
func (c *Config) Validate() error {
	c.setDefaults()
	switch {
	case c.Topic != "" && outbox.ValidateTopic(c.Topic) != nil:
		return fmt.Errorf("relay: Config.Topic: %w", outbox.ValidateTopic(c.Topic))
	case c.TopicTemplate != "" && !strings.Contains(c.TopicTemplate, "${"):
		return fmt.Errorf("relay: Config.TopicTemplate: %q has no ${aggregatetype} placeholder", c.TopicTemplate)
	case c.IDHeader == "event_type" || c.IDHeader == "aggregate_id":
		return fmt.Errorf("relay: Config.IDHeader: %q is already set from another field", c.IDHeader)
	case c.PollInterval < time.Millisecond:
		return fmt.Errorf("relay: Config.PollInterval: must be at least 1ms, got %s", c.PollInterval)
	case c.LingerPoll < 0:
		return fmt.Errorf("relay: Config.LingerPoll: must be positive, got %s", c.LingerPoll)
	case c.MaxAttempts < 1:
		return fmt.Errorf("relay: Config.MaxAttempts: must be at least 1, got %d", c.MaxAttempts)
	case c.OnDeadLetter != DeadLetterHold && c.OnDeadLetter != DeadLetterSkip:
		return fmt.Errorf("relay: Config.OnDeadLetter: %q is not hold or skip", c.OnDeadLetter)
	case c.RetryMin <= 0:
		return fmt.Errorf("relay: Config.RetryMin: must be positive, got %s", c.RetryMin)
	case c.RetryMax < c.RetryMin:
		return fmt.Errorf("relay: Config.RetryMax: %s is less than Config.RetryMin (%s)", c.RetryMax, c.RetryMin)
	case c.ShutdownTimeout < 0:
		return fmt.Errorf("relay: Config.ShutdownTimeout: must be positive, got %s", c.ShutdownTimeout)
	case c.DBTimeout <= 0:
		return fmt.Errorf("relay: Config.DBTimeout: must be positive, got %s", c.DBTimeout)
	}
	return nil
}
