// Package lease configures how a relay claims outbox rows: the table and
// its columns, the lease a claim holds its rows for, and the bounds of one
// claimed batch. relay.ServiceConfig.Lease is a Config; the claimer itself
// is internal (internal/claim).
package lease

import (
	"os"
	"strings"
	"time"

	"github.com/pgoutbox/outbox/internal/config"
)

// Config configures how a relay claims rows (relay.ServiceConfig.Lease).
type Config struct {
	// Table is the outbox table, optionally schema-qualified. Defaults to
	// "outbox".
	Table string
	// Lease is how long a claim holds its rows before another relay may
	// take them: it must cover publishing and marking one batch. Defaults
	// to 30s. Minimum 1s.
	Lease time.Duration
	// BatchSize is the most rows one claim returns. Defaults to 500.
	BatchSize int
	// MaxBatchBytes bounds the payload bytes one claim returns: rows are
	// taken in seq order while the payloads before each come to less than
	// this, so a claim takes at least one row, and more than this only
	// when its last row is larger than what was left. A row whose
	// payload alone is larger than MaxBatchBytes is claimed without its
	// payload, which is never read (Row.DecodeErr wraps
	// ErrPayloadTooLarge; the relay dead-letters it): it could not be a
	// Kafka record anyway unless the broker takes records that large.
	// A payload's bytes are its uncompressed size as the insert trigger
	// recorded it (payload_size, migration 00010: for jsonb the binary
	// form's size, within a few percent of the JSON text the relay reads
	// for most documents; more than the text for arrays of small numbers,
	// less for strings full of escapes); a row written before that
	// migration counts as MaxBatchBytes. The relay holds at most three
	// claimed batches (relay.Relay), so this bounds its memory whatever
	// the payload sizes: see DefaultMaxBatchBytes. Defaults to
	// DefaultMaxBatchBytes; 1..MaxMaxBatchBytes.
	MaxBatchBytes int64
	// RelayID names this relay in locked_by (status, logs); the Claimer
	// appends "/<8 hex digits>" per instance (Claimer.Holder), so a relay
	// restarted with the same ID never mistakes its previous incarnation's
	// leases for its own. Defaults to
	// "<hostname>-<random>".
	RelayID string
	// Columns names the columns that hold the event's fields, for an
	// existing outbox table whose producers cannot change (a Debezium
	// outbox table: see sql.Adopt). Defaults to pgoutbox's names.
	Columns Columns
}

// Columns maps an event's fields to column names. The lease bookkeeping
// columns (seq, locked_until, ...) always have pgoutbox's names.
type Columns struct {
	// ID is the event ID column, of type uuid. Defaults to "id".
	ID string
	// AggregateID is the aggregate (Kafka key) column, text. Defaults to
	// "aggregate_id"; Debezium: "aggregateid".
	AggregateID string
	// EventType is the event type column, text. Defaults to "event_type";
	// Debezium: "type".
	EventType string
	// Payload is the payload column, jsonb or text. Defaults to "payload".
	Payload string
	// AggregateType is an optional column whose value routes the event
	// (relay.Config.TopicTemplate's ${aggregatetype}); Debezium:
	// "aggregatetype". Defaults to "" (none).
	AggregateType string
}

// DebeziumColumns are the columns of Debezium's Outbox Event Router table
// (id, aggregatetype, aggregateid, type, payload).
var DebeziumColumns = Columns{ID: "id", AggregateID: "aggregateid", EventType: "type", Payload: "payload", AggregateType: "aggregatetype"}

// DefaultLease is Config.Lease's default.
const DefaultLease = 30 * time.Second

// DefaultBatchSize is Config.BatchSize's default.
const DefaultBatchSize = 500

// MaxBatchSize bounds Config.BatchSize.
const MaxBatchSize = 10000

// DefaultMaxBatchBytes is Config.MaxBatchBytes's default, 16 MiB: with
// 900 KB payloads a claim takes 19 rows instead of 500 (450 MB), and the
// relay process stays under 256 MiB of RSS (docs/database.md).
const DefaultMaxBatchBytes = 16 << 20

// MaxMaxBatchBytes bounds Config.MaxBatchBytes: 1 GiB, PostgreSQL's limit
// on one value.
const MaxMaxBatchBytes = 1 << 30

// WithDefaults returns a copy of c with every zero field set to its
// default (RelayID: a new DefaultRelayID on each call).
func (c Config) WithDefaults() Config {
	if c.Table == "" {
		c.Table = config.DefaultTable
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if c.RelayID == "" {
		c.RelayID = DefaultRelayID()
	}
	if c.Columns.ID == "" {
		c.Columns.ID = "id"
	}
	if c.Columns.AggregateID == "" {
		c.Columns.AggregateID = "aggregate_id"
	}
	if c.Columns.EventType == "" {
		c.Columns.EventType = "event_type"
	}
	if c.Columns.Payload == "" {
		c.Columns.Payload = "payload"
	}
	return c
}

// Validate returns a *outbox.FieldError naming the first invalid field of c
// with its defaults applied; c itself is not changed.
func (c Config) Validate() error {
	c = c.WithDefaults()
	switch {
	case c.Lease < time.Second:
		return config.Invalid("lease", "Lease", "must be at least 1s, got %s", c.Lease)
	case c.BatchSize < 1 || c.BatchSize > MaxBatchSize:
		return config.Invalid("lease", "BatchSize", "must be 1..%d, got %d", MaxBatchSize, c.BatchSize)
	case c.MaxBatchBytes < 1 || c.MaxBatchBytes > MaxMaxBatchBytes:
		return config.Invalid("lease", "MaxBatchBytes", "must be 1..%d bytes, got %d", MaxMaxBatchBytes, c.MaxBatchBytes)
	case strings.Count(c.Table, ".") > 1:
		return config.Invalid("lease", "Table", "%q is not a table or schema.table name", c.Table)
	}
	return nil
}

// DefaultRelayID returns "<hostname>-<8 hex digits>", unique per process:
// Config.RelayID's default.
func DefaultRelayID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "relay"
	}
	return host + "-" + config.RandomHex(4)
}
