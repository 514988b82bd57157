package relay

import (
	"fmt"
	"strings"
	"time"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/config"
	"github.com/pgoutbox/outbox/kafka/format"
)

// Config configures a Relay. Durations are wall-clock durations; all lease
// arithmetic itself is done by the database clock (package lease). The zero
// value of every field means its default (WithDefaults); Validate checks a
// configuration without changing it.
type Config struct {
	// Topic is the Kafka topic for rows whose topic column is NULL.
	// NewService requires it unless TopicTemplate is set; New accepts ""
	// (then every row must name its topic). Defaults to "".
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
	// Several relays that listen take turns instead: each polls in its own
	// wall-clock slots of PollInterval, one in Members, and wakes the
	// owners of the events it finds, so the table is polled once per
	// PollInterval whatever the number of relays (at most a sixth of
	// lease.Config.Lease apart per relay). Defaults to DefaultPollInterval
	// (500ms); at least 1ms.
	PollInterval time.Duration
	// ClaimWindow is how long the relay keeps looking after a claim that found
	// events: it claims again every ClaimWindowPoll (doubling up to 4×ClaimWindowPoll
	// while claims come back empty) until ClaimWindow has passed without an
	// event. Writers in the default outbox.WakeupDebounced mode notify once
	// per WakeupInterval (20ms) per process; the events committed inside
	// that window carry no notification and are found by these claims, so
	// ClaimWindow must be at least the writers' WakeupInterval. While every
	// event found comes with its own notification (a writer committing less
	// often than once per WakeupInterval) the window is sparse: one claim
	// ClaimWindow after a hit, instead of one per ClaimWindowPoll; a window
	// or poll claim that finds events no notification announced makes it
	// dense again for 10s. Defaults to DefaultClaimWindow (25ms);
	// negative disables lingering (then use outbox.WakeupEveryTx). A relay
	// without notifications (New with a nil wake channel) never lingers: it
	// polls every PollInterval.
	ClaimWindow time.Duration
	// ClaimWindowPoll is the interval between lingering claims while events
	// arrive at less than 2,000/s (averaged over 50ms); above that rate the
	// relay is busy and claims every BusyClaimInterval instead. After an
	// empty claim the gap doubles, up to 4×ClaimWindowPoll. Defaults to
	// DefaultClaimWindowPoll (500µs).
	ClaimWindowPoll time.Duration
	// BusyClaimInterval is the interval between claims while events arrive
	// at 2,000/s or more (averaged over 50ms): the relay takes bigger
	// batches instead of claiming every ClaimWindowPoll. It is never
	// shorter than ClaimWindowPoll. Shorter means lower latency at high
	// rates, and more claims taking CPU from the writers on a small machine
	// (the trade-off, measured: docs/benchmarks.md, "Above 2,000 events/s").
	// Defaults to DefaultBusyClaimInterval (20ms).
	BusyClaimInterval time.Duration
	// MaxAttempts is how many failed publishes, each answered by the broker
	// with an error, an event may have before it is dead-lettered. Failures
	// where the broker was not reached (network errors, timeouts) do not
	// count: an outage is not a poison event. Defaults to
	// DefaultMaxAttempts (16: about 10 minutes with the default retry
	// delays). Errors that no retry can fix (a record the broker refuses, e.g.
	// MESSAGE_TOO_LARGE, an illegal topic name) and rows that cannot be
	// decoded dead-letter at once.
	MaxAttempts int
	// OnDeadLetter says what happens to the later events of a dead-lettered
	// event's aggregate. Defaults to DeadLetterHold.
	OnDeadLetter DeadLetterMode
	// RetryMin is the delay before a failed event is retried; it doubles
	// per failed attempt of that event, with ±20% jitter, up to RetryMax.
	// Defaults to DefaultRetryMin (500ms).
	RetryMin time.Duration
	// RetryMax caps the retry delay. Defaults to DefaultRetryMax (1m).
	RetryMax time.Duration
	// ShutdownTimeout bounds a graceful stop: after the context given to
	// Run is done, the in-flight publish may take this long; then delivered
	// rows are marked, the rest released, within ShutdownGrace more (1s),
	// and Run returns by then even if the database does not answer (what
	// it could not give back is logged in one line). Defaults to
	// DefaultShutdownTimeout (10s).
	ShutdownTimeout time.Duration
	// DBTimeout bounds each claim, mark and release statement. Defaults to
	// DefaultDBTimeout (10s).
	DBTimeout time.Duration
	// StallTimeout is how long a step may make no progress before Health
	// reports the relay stalled (and /readyz fails, and one error line is
	// logged): every claim failing, rows claimed but none published or
	// dead-lettered, publishes the broker leaves unanswered (see
	// Health.Step), or every mark failing. Defaults to
	// DefaultStallTimeout (30s); at least 1s.
	StallTimeout time.Duration
	// Observer is told what the relay does (metrics, tests, benchmarks).
	// Defaults to nil (nothing).
	Observer Observer
	// Format is what goes into each record: the value as the JSON payload
	// or encoded in a Schema Registry's schema, and the CloudEvents
	// headers. Defaults to the zero format.Config: the payload as stored,
	// no CloudEvents headers. The value format is applied by the publisher
	// NewService builds (with the registry client); New with a Publisher of
	// your own applies the CloudEvents headers only.
	Format format.Config
}

// DeadLetterMode is Config.OnDeadLetter: what happens to the later events of
// a dead-lettered event's aggregate. It implements flag.Value.
type DeadLetterMode string

// Config.OnDeadLetter values.
const (
	// DeadLetterHold keeps them unpublished until the dead letter is
	// requeued, so per-aggregate order is kept.
	DeadLetterHold DeadLetterMode = "hold"
	// DeadLetterSkip publishes them, giving up order for that aggregate.
	DeadLetterSkip DeadLetterMode = "skip"
)

// String implements flag.Value.
func (m *DeadLetterMode) String() string { return string(*m) }

// Set implements flag.Value: "hold" or "skip".
func (m *DeadLetterMode) Set(s string) error {
	switch DeadLetterMode(s) {
	case DeadLetterHold, DeadLetterSkip:
		*m = DeadLetterMode(s)
		return nil
	}
	return fmt.Errorf("%q is not hold or skip", s)
}

// Defaults of Config.
const (
	DefaultPollInterval    = 500 * time.Millisecond
	DefaultClaimWindow     = 25 * time.Millisecond // a little more than outbox.WriterConfig's 20ms WakeupInterval
	DefaultClaimWindowPoll = 500 * time.Microsecond
	// DefaultBusyClaimInterval: at 10ms the writers kept 0.83-0.87 of their
	// commits/s at saturation on 2 cores, at 20ms 0.92-0.98 (see
	// Config.BusyClaimInterval).
	DefaultBusyClaimInterval = 20 * time.Millisecond
	DefaultMaxAttempts       = 16
	DefaultRetryMin          = 500 * time.Millisecond
	DefaultRetryMax          = time.Minute
	DefaultShutdownTimeout   = 10 * time.Second
	DefaultDBTimeout         = 10 * time.Second
	DefaultStallTimeout      = 30 * time.Second
)

// WithDefaults returns a copy of c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	set := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	set(&c.PollInterval, DefaultPollInterval)
	set(&c.ClaimWindow, DefaultClaimWindow)
	set(&c.ClaimWindowPoll, DefaultClaimWindowPoll)
	set(&c.BusyClaimInterval, DefaultBusyClaimInterval)
	set(&c.RetryMin, DefaultRetryMin)
	set(&c.RetryMax, DefaultRetryMax)
	set(&c.ShutdownTimeout, DefaultShutdownTimeout)
	set(&c.DBTimeout, DefaultDBTimeout)
	set(&c.StallTimeout, DefaultStallTimeout)
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.OnDeadLetter == "" {
		c.OnDeadLetter = DeadLetterHold
	}
	c.Format = c.Format.WithDefaults()
	return c
}

// Validate returns a *config.FieldError naming the first invalid field of
// c with its defaults applied; c itself is not changed.
func (c Config) Validate() error {
	c = c.WithDefaults()
	bad := func(field, format string, args ...any) error { return config.Invalid("relay", field, format, args...) }
	switch {
	case c.Topic != "" && outbox.ValidateTopic(c.Topic) != nil:
		return bad("Topic", "%v", outbox.ValidateTopic(c.Topic))
	case c.TopicTemplate != "" && !strings.Contains(c.TopicTemplate, "${"):
		return bad("TopicTemplate", "%q has no ${aggregatetype} placeholder", c.TopicTemplate)
	case c.IDHeader == "event_type" || c.IDHeader == "aggregate_id":
		return bad("IDHeader", "%q is already set from another field", c.IDHeader)
	case c.PollInterval < time.Millisecond:
		return bad("PollInterval", "must be at least 1ms, got %s", c.PollInterval)
	case c.ClaimWindowPoll < 0:
		return bad("ClaimWindowPoll", "must be positive, got %s", c.ClaimWindowPoll)
	case c.BusyClaimInterval < 0:
		return bad("BusyClaimInterval", "must be positive, got %s", c.BusyClaimInterval)
	case c.MaxAttempts < 1:
		return bad("MaxAttempts", "must be at least 1, got %d", c.MaxAttempts)
	case c.OnDeadLetter != DeadLetterHold && c.OnDeadLetter != DeadLetterSkip:
		return bad("OnDeadLetter", "%q is not hold or skip", c.OnDeadLetter)
	case c.RetryMin <= 0:
		return bad("RetryMin", "must be positive, got %s", c.RetryMin)
	case c.RetryMax < c.RetryMin:
		return bad("RetryMax", "%s is less than Config.RetryMin (%s)", c.RetryMax, c.RetryMin)
	case c.ShutdownTimeout < 0:
		return bad("ShutdownTimeout", "must be positive, got %s", c.ShutdownTimeout)
	case c.DBTimeout <= 0:
		return bad("DBTimeout", "must be positive, got %s", c.DBTimeout)
	case c.StallTimeout < time.Second:
		return bad("StallTimeout", "must be at least 1s, got %s", c.StallTimeout)
	}
	return c.Format.Validate()
}
