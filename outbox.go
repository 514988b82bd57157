// Package outbox is the writer side of pgoutbox: it writes events into the
// outbox table inside the caller's own database transaction, so an event
// exists if and only if the business change it describes was committed.
//
// A relay (cmd/outbox-relay) then publishes every committed event to Kafka at
// least once, keyed by its aggregate ID, in insert order per aggregate.
//
//	tx, _ := pool.Begin(ctx)
//	// ... business change on tx ...
//	err := outbox.Add(ctx, tx, outbox.Event{
//		ID:          outbox.NewID(),
//		AggregateID: order.ID,
//		Type:        "order.paid",
//		Payload:     json.RawMessage(`{"amount":1200}`),
//	})
//	// ... tx.Commit(ctx)
package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pgoutbox/outbox/internal/config"
	"github.com/pgoutbox/outbox/internal/sqlname"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultMaxRecordBytes is the default upper bound of the Kafka record the
// relay publishes for an event (WriterConfig.MaxRecordBytes): 1,000,000
// bytes. Kafka's default message.max.bytes, 1,048,588 bytes, bounds a whole
// record batch (61 bytes of batch header plus each record's framing); the
// rest of the margin covers the headers the relay may add from its own
// configuration (--id-header) and the kafka-go producer's accounting
// against its default BatchBytes of 1 MiB. So an event the writer accepts
// is not refused by a broker with default settings.
const DefaultMaxRecordBytes = 1_000_000

// MaxAggregateIDBytes is the longest Event.AggregateID the writer accepts:
// 1024 bytes (of UTF-8, as PostgreSQL's octet_length counts them in a UTF8
// database; a character takes 1 to 4). The aggregate ID is a key of the
// B-tree index outbox_unpublished_aggregate_idx (aggregate_id, seq), and a
// B-tree refuses an index row over 2704 bytes on PostgreSQL's default 8 kB
// pages (a third of a page: BTMaxItemSize, checked by _bt_check_third_page
// in src/backend/access/nbtree/nbtutils.c; SQLSTATE 54000 "index row size
// ... exceeds btree version 4 maximum 2704"), which an incompressible ID of
// about 2,680 bytes already reaches. Without this limit such an ID would
// pass validation and then abort the caller's transaction at the INSERT.
// 1024 bytes stays well under the index limit, and the table's row check
// outbox_aggregate_id_check (migration 00008's trigger; a CHECK constraint
// in 00007) refuses the same rows from plain-SQL writers.
const MaxAggregateIDBytes = 1024

// DefaultChannel ("outbox") is the Postgres NOTIFY channel the writer
// signals and the relay LISTENs on unless configured.
const DefaultChannel = config.DefaultChannel

// DefaultWakeupInterval is WriterConfig.WakeupInterval's default.
const DefaultWakeupInterval = 20 * time.Millisecond

// DefaultTable ("outbox") is the outbox table's name unless configured:
// the writer's, the relay's and the migrations' default.
const DefaultTable = config.DefaultTable

// Event is one event to publish. It becomes one Kafka record: key
// AggregateID, value Payload, headers event_id, event_type, aggregate_id
// plus Headers.
type Event struct {
	// ID identifies the event; consumers dedupe on it (Kafka header
	// event_id). Make one with NewID. If zero, Add assigns a UUIDv7.
	ID uuid.UUID
	// AggregateID is the Kafka key: all events of one aggregate go to one
	// partition, in insert order. Required: non-empty text of at most
	// MaxAggregateIDBytes (1024) bytes.
	AggregateID string
	// Type names the event, e.g. "payment.captured" (header event_type).
	// Required, non-empty.
	Type string
	// Payload is the record value: valid JSON; with key and headers, within
	// the writer's MaxRecordBytes (default 1,000,000 bytes). Required; use
	// `null` for none.
	Payload json.RawMessage
	// Headers are extra Kafka headers. Optional. Names must not be empty
	// nor one of the headers the relay sets itself (event_id, event_type,
	// aggregate_id). A nil or empty map stores SQL NULL.
	Headers map[string]string
	// Topic overrides the relay's --topic for this event. Optional; must be
	// a legal Kafka topic name ([a-zA-Z0-9._-], at most 249 characters).
	Topic string
}

// NewID returns a new UUIDv7 (RFC 9562): time-ordered, so IDs of events
// written one after the other sort by time, which keeps the primary key
// index compact. It panics only if the system's random source fails.
func NewID() uuid.UUID {
	return uuid.Must(uuid.NewV7())
}

// Querier is what Add needs from a database handle: pgx.Tx, pgxpool.Tx,
// *pgx.Conn, *pgxpool.Conn and *pgxpool.Pool all satisfy it. Pass the
// transaction of the business change; a connection or pool outside a
// transaction commits the events on their own.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// ErrInvalidEvent is wrapped by every *ValidationError.
var ErrInvalidEvent = errors.New("invalid event")

// ValidationError reports an event that Add refused before writing
// anything. It wraps ErrInvalidEvent.
type ValidationError struct {
	// Index is the event's position in the Add call, from 0.
	Index int
	// Field is the offending field: "AggregateID", "Type", "Payload",
	// "Headers" or "Topic".
	Field string
	// Reason says what is wrong with it.
	Reason string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("outbox: invalid event %d: %s: %s", e.Index, e.Field, e.Reason)
}

// Unwrap returns ErrInvalidEvent.
func (e *ValidationError) Unwrap() error { return ErrInvalidEvent }

// IsValidationError reports whether err is or wraps a *ValidationError.
func IsValidationError(err error) bool {
	var v *ValidationError
	return errors.As(err, &v)
}

// WriterConfig configures a Writer. The zero value is valid.
type WriterConfig struct {
	// Table is the outbox table, optionally schema-qualified
	// ("app.outbox"). Defaults to "outbox" (found through search_path).
	Table string
	// Channel is the NOTIFY channel that wakes the relay. Defaults to
	// "outbox". It must match the relay's --channel.
	Channel string
	// MaxRecordBytes bounds, in bytes, the Kafka record the relay will
	// publish for each event: its value (the payload as PostgreSQL prints it
	// back from jsonb, which may be longer than what was written: ", " and
	// ": " separators, numbers in plain notation), its key (the aggregate
	// ID) and its headers, names and values (event_id, event_type,
	// aggregate_id, the trace context and the event's own). An event over
	// it is refused before anything is written, rather than dead-lettered
	// by the relay later. Defaults to 1,000,000 (DefaultMaxRecordBytes).
	MaxRecordBytes int
	// Wakeup chooses how the relay is woken after commit. Defaults to
	// WakeupDebounced.
	Wakeup WakeupMode
	// WakeupInterval is the debounce window of WakeupDebounced: at most one
	// transaction per window, per Writer, carries a notification (outbox.Add
	// uses one Writer per process). It must not exceed the relay's
	// --claim-window (relay.Config.ClaimWindow, 25ms). Defaults to 20ms.
	WakeupInterval time.Duration
}

// WakeupMode says which transactions carry a pg_notify to the relay.
type WakeupMode int

const (
	// WakeupDebounced notifies in at most one transaction per
	// WakeupInterval. Postgres serializes the commits of all transactions
	// that called NOTIFY on one cluster-wide lock held through the commit
	// record's flush (PreCommit_Notify in src/backend/commands/async.c), so
	// notifying in every transaction caps a busy writer's commit rate
	// (docs/benchmarks.md, notify-cost). The relay covers the events committed
	// inside a window: after a claim that found events it keeps claiming
	// every millisecond or so for relay.Config.ClaimWindow (25ms).
	WakeupDebounced WakeupMode = iota
	// WakeupEveryTx notifies in every transaction that adds events: lowest
	// latency at low rates, lowest writer throughput at high rates. The
	// payload names the events' key partitions ("kp:3,17"), so that of
	// several relays only those that own them wake.
	WakeupEveryTx
	// WakeupNone never notifies; the relay finds the events by polling
	// (--poll-interval).
	WakeupNone
)

func (m WakeupMode) String() string {
	switch m {
	case WakeupDebounced:
		return "debounced"
	case WakeupEveryTx:
		return "every-tx"
	case WakeupNone:
		return "none"
	}
	return fmt.Sprintf("WakeupMode(%d)", int(m))
}

// FieldError says which field of which component's Config is invalid and
// why: every Config's Validate in this module (WriterConfig here,
// relay.Config, lease.Config, kafka.Config, notify.Config, and the
// outbox-relay command's metrics and retention Configs) returns one, so
// callers can name the bad field without parsing the message. Its Error is
// "<component>: Config.<Field>: <reason>" ("outbox: WriterConfig.<Field>:
// ..." here). Its fields (the type is defined in an internal package, so
// go doc does not list them here):
//
//	Component string // the package owning the Config: "relay", "lease", "kafka", "notify", "outbox", ...
//	Field     string // the Config field's name, e.g. "Lease"
//	Type      string // the configuration type's name; "" means "Config"
//	Reason    string // what is wrong, e.g. "must be at least 1s, got 500ms"
type FieldError = config.FieldError

// WithDefaults returns a copy of c with every zero field set to its
// default.
func (c WriterConfig) WithDefaults() WriterConfig {
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.Channel == "" {
		c.Channel = DefaultChannel
	}
	if c.MaxRecordBytes == 0 {
		c.MaxRecordBytes = DefaultMaxRecordBytes
	}
	if c.WakeupInterval == 0 {
		c.WakeupInterval = DefaultWakeupInterval
	}
	return c
}

// Validate returns a *FieldError naming the first invalid field of c with
// its defaults applied; c itself is not changed.
func (c WriterConfig) Validate() error {
	c = c.WithDefaults()
	bad := func(field, format string, args ...any) error {
		return &config.FieldError{Component: "outbox", Field: field, Reason: fmt.Sprintf(format, args...), Type: "WriterConfig"}
	}
	switch {
	case c.MaxRecordBytes < 0:
		return bad("MaxRecordBytes", "must be positive, got %d", c.MaxRecordBytes)
	case c.WakeupInterval < 0:
		return bad("WakeupInterval", "must be positive, got %s", c.WakeupInterval)
	case c.Wakeup < WakeupDebounced || c.Wakeup > WakeupNone:
		return bad("Wakeup", "unknown mode %d", int(c.Wakeup))
	case strings.Count(c.Table, ".") > 1 || strings.HasPrefix(c.Table, ".") || strings.HasSuffix(c.Table, "."):
		return bad("Table", "%q is not a table or schema.table name", c.Table)
	}
	return nil
}

// TableIdentifier quotes a table name that may be schema-qualified
// ("app.outbox" becomes "app"."outbox") for use in SQL text.
func TableIdentifier(table string) string {
	return sqlname.Quote(table)
}
