package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/propagation"

	"github.com/pgoutbox/outbox/internal/config"
	"github.com/pgoutbox/outbox/internal/sqlname"
)

// Writer writes events into the outbox table. It is safe for concurrent use;
// create one per process (its debounce state is shared by all callers).
type Writer struct {
	cfg       WriterConfig
	insertSQL string
	notifySQL string // insertSQL plus a pg_notify, in one statement
	// notifyKeysSQL is notifySQL with the payload naming the key
	// partitions of the events (WakeupEveryTx).
	notifyKeysSQL string
	lastNotify    atomic.Int64
	now           func() time.Time
}

// NewWriter returns a Writer for cfg. It returns an error naming the first
// invalid field of cfg.
func NewWriter(cfg WriterConfig) (*Writer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	table := TableIdentifier(cfg.Table)
	// unnest yields rows in array order, so seq (the identity) follows the
	// order of the events in the call.
	insert := `INSERT INTO ` + table + ` (id, aggregate_id, event_type, payload, headers, topic)
SELECT * FROM unnest($1::text[]::uuid[], $2::text[], $3::text[], $4::text[]::jsonb[], $5::text[]::jsonb[], $6::text[])`
	return &Writer{
		cfg:       cfg,
		insertSQL: insert,
		notifySQL: `WITH ins AS (` + insert + ` RETURNING 1) SELECT pg_notify($7, '') FROM (SELECT 1) AS one`,
		// Every transaction notifies: the payload names its events' key
		// partitions (computed from the aggregate IDs by the table's
		// function, not read back: a writer role may lack SELECT), so only
		// the relays that own them wake. (A debounced
		// notification stands for the events of the window without one,
		// wherever they are: it wakes every relay.)
		notifyKeysSQL: `WITH ins AS (` + insert + ` RETURNING 1), kp AS (SELECT DISTINCT ` + sqlname.Beside(cfg.Table, "_key_partition") +
			`(a) AS p FROM unnest($2::text[]) a) SELECT pg_notify($7, CASE WHEN count(*) <= ` + strconv.Itoa(config.MaxKeyPartitionsNamed) +
			` THEN '` + config.KeyPartitionsPrefix + `' || string_agg(p::text, ',') ELSE '' END) FROM kp`,
		now: time.Now,
	}, nil
}

var defaultWriter, _ = NewWriter(WriterConfig{})

// Add writes events into the outbox table through q, the caller's
// transaction, with the default WriterConfig (table "outbox", channel
// "outbox", records up to 1,000,000 bytes, debounced wake-ups). See Writer.Add.
func Add(ctx context.Context, q Querier, events ...Event) error {
	return defaultWriter.Add(ctx, q, events...)
}

// Add validates every event, then inserts them all in one round trip through
// q, in order, and (depending on WriterConfig.Wakeup) queues a pg_notify on
// the relay's channel that Postgres delivers only if and when the
// transaction commits; a rolled-back transaction leaves neither rows nor a
// wake-up. An event with a zero ID gets a new UUIDv7. If ctx carries an
// OpenTelemetry span, its W3C traceparent (and tracestate) header is added
// to every event that does not set one itself.
//
// It returns a *ValidationError (wrapping ErrInvalidEvent) and writes
// nothing if any event is invalid: an empty AggregateID or one over
// MaxAggregateIDBytes (1024 bytes), an empty Type, an empty or invalid
// Payload, a record over MaxRecordBytes, an empty or reserved header name,
// or an illegal Topic; or if PostgreSQL would refuse it, which would abort
// the caller's transaction: a NUL byte or invalid UTF-8 in AggregateID,
// Type or a header's name or value, invalid UTF-8, a \u0000 escape, a
// lone surrogate escape (\ud800 without a low surrogate after it) or a
// number outside numeric's range in Payload (jsonb refuses them all).
// The caller's transaction stays usable after a *ValidationError: nothing
// was sent. The outbox table's row checks (migration 00008's
// trigger, raising check_violation, SQLSTATE 23514, that names
// outbox_aggregate_id_check, outbox_event_type_check, outbox_headers_check
// or outbox_topic_check) refuse the rows of the first list from plain-SQL
// writers. Otherwise it returns the database error wrapped as
// "outbox: insert events: ...". A duplicate ID is a unique violation on
// outbox_pkey (SQLSTATE 23505) and, inside a transaction, aborts it.
func (w *Writer) Add(ctx context.Context, q Querier, events ...Event) error {
	if len(events) == 0 {
		return nil
	}
	// The caller's trace context (W3C traceparent and tracestate), if its
	// ctx carries an OpenTelemetry span, travels with every event as Kafka
	// headers, so a consumer's span can continue the writer's trace.
	trace := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, trace)
	// IDs travel as text (cast to uuid in SQL): a text[] parameter is
	// encoded in every pgx query exec mode, a []uuid.UUID is not in exec
	// and simple_protocol (which PgBouncer users pick).
	ids := make([]string, len(events))
	aggs := make([]string, len(events))
	types := make([]string, len(events))
	payloads := make([]string, len(events))
	headers := make([]*string, len(events))
	topics := make([]*string, len(events))
	for i := range events {
		e := &events[i]
		h := e.Headers
		if len(trace) > 0 {
			h = withTrace(h, trace)
		}
		if err := w.validateEvent(i, e, h); err != nil {
			return err
		}
		id := e.ID
		if id == uuid.Nil {
			id = NewID()
		}
		ids[i] = id.String()
		aggs[i] = e.AggregateID
		types[i] = e.Type
		payloads[i] = string(e.Payload)
		if len(h) > 0 {
			b, err := json.Marshal(h)
			if err != nil { // map[string]string always marshals
				return fmt.Errorf("outbox: encode headers: %w", err)
			}
			s := string(b)
			headers[i] = &s
		}
		if e.Topic != "" {
			t := e.Topic
			topics[i] = &t
		}
	}
	var err error
	if w.shouldNotify(ctx) {
		notify := w.notifySQL
		if w.cfg.Wakeup == WakeupEveryTx {
			notify = w.notifyKeysSQL
		}
		_, err = q.Exec(ctx, notify, ids, aggs, types, payloads, headers, topics, w.cfg.Channel)
	} else {
		_, err = q.Exec(ctx, w.insertSQL, ids, aggs, types, payloads, headers, topics)
	}
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
			return fmt.Errorf("outbox: insert events: table %s not found: create it with `outbox-relay migrate` (or sql.Migrate from github.com/pgoutbox/outbox/sql; WriterConfig.Table names another table): %w", w.cfg.Table, err)
		}
		return fmt.Errorf("outbox: insert events: %w", err)
	}
	return nil
}

// Validate checks events as Add does, without writing anything: it
// returns the *ValidationError (wrapping ErrInvalidEvent) Add would return
// for the first invalid one, or nil. It sees no trace context: the
// traceparent and tracestate headers Add adds from its ctx (about 200 bytes)
// are not counted in the record size.
func (w *Writer) Validate(events ...Event) error {
	for i := range events {
		if err := w.validateEvent(i, &events[i], events[i].Headers); err != nil {
			return err
		}
	}
	return nil
}

// withTrace returns h plus the trace headers it does not set itself,
// without modifying h.
func withTrace(h map[string]string, trace propagation.MapCarrier) map[string]string {
	out := make(map[string]string, len(h)+len(trace))
	for k, v := range trace {
		out[k] = v
	}
	for k, v := range h {
		out[k] = v // the event's own header wins
	}
	return out
}

// shouldNotify decides whether this call carries a notification.
func (w *Writer) shouldNotify(ctx context.Context) bool {
	if withoutWakeup(ctx) {
		return false
	}
	switch w.cfg.Wakeup {
	case WakeupEveryTx:
		return true
	case WakeupNone:
		return false
	}
	now := w.now().UnixNano()
	last := w.lastNotify.Load()
	if now-last < int64(w.cfg.WakeupInterval) {
		return false
	}
	return w.lastNotify.CompareAndSwap(last, now)
}

// validateEvent refuses event i, e, whose headers with the trace context
// are h, with a *ValidationError: validate's rules, then checkSize's.
func (w *Writer) validateEvent(i int, e *Event, h map[string]string) error {
	if err := w.validate(i, e); err != nil {
		return err
	}
	return w.checkSize(i, e, h)
}

func (w *Writer) validate(i int, e *Event) error {
	bad := func(field, reason string) error {
		return &ValidationError{Index: i, Field: field, Reason: reason}
	}
	switch {
	case e.AggregateID == "":
		return bad("AggregateID", "empty")
	case len(e.AggregateID) > MaxAggregateIDBytes:
		return bad("AggregateID", fmt.Sprintf("%d bytes, over the limit of %d (MaxAggregateIDBytes)", len(e.AggregateID), MaxAggregateIDBytes))
	case e.Type == "":
		return bad("Type", "empty")
	case len(e.Payload) == 0:
		return bad("Payload", "empty (use null for an event without a payload)")
	case !json.Valid(e.Payload):
		return bad("Payload", "not valid JSON")
	}
	if p := textProblem(e.AggregateID); p != "" {
		return bad("AggregateID", p)
	}
	if p := textProblem(e.Type); p != "" {
		return bad("Type", p)
	}
	if p := jsonbProblem(e.Payload); p != "" {
		return bad("Payload", p)
	}
	for k, v := range e.Headers {
		switch k {
		case "":
			return bad("Headers", "empty header name")
		case "event_id", "event_type", "aggregate_id":
			return bad("Headers", fmt.Sprintf("%q is set by the relay from the event's own fields", k))
		}
		if p := textProblem(k); p != "" {
			return bad("Headers", fmt.Sprintf("header name %q %s", k, p))
		}
		if p := textProblem(v); p != "" {
			return bad("Headers", fmt.Sprintf("value of header %q %s", k, p))
		}
	}
	if e.Topic != "" {
		if err := ValidateTopic(e.Topic); err != nil {
			return bad("Topic", err.Error())
		}
	}
	return nil
}

// maxTopicLength is the longest topic name Kafka accepts, in characters
// (org.apache.kafka.common.internals.Topic.MAX_NAME_LENGTH).
const maxTopicLength = 249

// ValidateTopic returns nil if Kafka accepts topic as a topic name, else an
// error saying why. The rules are the broker's own
// (org.apache.kafka.common.internals.Topic.validate, which makes it answer
// INVALID_TOPIC_EXCEPTION): not empty, not "." or "..", at most
// maxTopicLength characters, only ASCII letters, digits, '.', '_' and '-'.
// Add applies it to every event's Topic, the relay to every record's.
func ValidateTopic(topic string) error {
	var why string
	switch n := utf8.RuneCountInString(topic); {
	case topic == "":
		why = "it is empty"
	case topic == "." || topic == "..":
		why = `"." and ".." are reserved`
	case n > maxTopicLength:
		why = fmt.Sprintf("it is %d characters long, over Kafka's limit of %d", n, maxTopicLength)
	default:
		for i, r := range topic {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
				why = fmt.Sprintf("%q at byte %d is not an ASCII letter, digit, '.', '_' or '-'", r, i)
				break
			}
		}
	}
	if why == "" {
		return nil
	}
	shown := topic
	if len(shown) > 64 {
		shown = shown[:64] + "..."
	}
	return fmt.Errorf("topic %q is an illegal Kafka topic name: %s", shown, why)
}

// relayHeaderBytes is what the relay's own headers add to a record besides
// their values of variable length: the names event_id, event_type and
// aggregate_id, and the event ID's 36 characters.
const relayHeaderBytes = len("event_id") + 36 + len("event_type") + len("aggregate_id")

// checkSize refuses e if the record the relay will publish for it (value as
// PostgreSQL prints the stored jsonb, key, headers h and the relay's own)
// is over MaxRecordBytes.
func (w *Writer) checkSize(i int, e *Event, h map[string]string) error {
	value, err := jsonbTextLen(e.Payload)
	if err != nil {
		reason := "not valid JSON: " + err.Error()
		var re *numericRangeError
		if errors.As(err, &re) {
			reason = re.Error()
		}
		return &ValidationError{Index: i, Field: "Payload", Reason: reason}
	}
	rest := len(e.AggregateID) + relayHeaderBytes + len(e.Type) + len(e.AggregateID)
	for k, v := range h {
		rest += len(k) + len(v)
	}
	if value+rest > w.cfg.MaxRecordBytes {
		return &ValidationError{Index: i, Field: "Payload", Reason: fmt.Sprintf(
			"the Kafka record would be %d bytes, over the limit of %d (MaxRecordBytes): payload %d bytes as PostgreSQL prints it back from jsonb (%d as written), key and headers %d",
			value+rest, w.cfg.MaxRecordBytes, value, len(e.Payload), rest)}
	}
	return nil
}
