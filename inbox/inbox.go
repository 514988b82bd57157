// Package inbox makes Kafka consumers of outbox events idempotent.
//
// The relay delivers every event at least once: after a crash between
// publishing and marking, an event is published again with the same
// event_id header. A consumer that applies each event's effect in
// PostgreSQL records the event ID in the same transaction as the effect,
// in a processed_events table whose primary key is (consumer, event_id);
// a redelivered event finds its ID there and its effect is skipped:
//
//	applied, err := inbox.Handle(ctx, pool, "billing", eventID, func(tx pgx.Tx) error {
//	    _, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance + $1 WHERE id = $2", amount, account)
//	    return err
//	})
//
// Because the ID and the effect commit or roll back together, an event is
// applied exactly once per consumer name however often it is delivered,
// and concurrent deliveries of one event (two consumer instances after a
// rebalance) apply it once: the second INSERT waits for the first
// transaction and then finds the row.
//
// The table is created by Migrate, or by running CreateTableSQL with the
// application's own migrations. Rows are never deleted by this package;
// delete old ones (processed_at) once redeliveries that old can no longer
// happen, e.g. after the topic's retention.
//
// The package is public because applications' consumers call it: the
// consumer side of at-least-once delivery is the application's code, not
// the relay's.
package inbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/segmentio/kafka-go"
)

// CreateTableSQL creates the processed_events table (if it does not exist)
// in the first schema of the search_path. Run it with your migrations, or
// call Migrate.
const CreateTableSQL = `CREATE TABLE IF NOT EXISTS processed_events (
    consumer     text        NOT NULL,
    event_id     uuid        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
)`

// migrateLockSQL takes a transaction-scoped advisory lock whose key is
// derived from a fixed name, so that only concurrent inbox migrations wait
// on it.
const migrateLockSQL = `SELECT pg_advisory_xact_lock(hashtext('pgoutbox.inbox.migrate'))`

// Execer runs a statement; *pgxpool.Pool, *pgx.Conn and pgx.Tx implement
// it.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Beginner starts a transaction; *pgxpool.Pool and *pgx.Conn implement it.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Migrate creates the processed_events table if it does not exist
// (CreateTableSQL). Safe to run concurrently and repeatedly. Errors are
// wrapped as "inbox: migrate: ...".
func Migrate(ctx context.Context, db Execer) error {
	// CREATE TABLE IF NOT EXISTS is not safe concurrently: two sessions
	// can both miss the table and the loser fails on the catalog's
	// unique indexes (pg_type: 42710, pg_class: 42P07, or 23505). Both
	// statements go in one simple-protocol message (no arguments), which
	// PostgreSQL runs as one implicit transaction, so the advisory
	// transaction lock serializes concurrent migrations and is released
	// at its end. Errors are not swallowed: with the lock, one of those
	// codes means something else owns the name (a type called
	// processed_events, say), and inside the caller's pgx.Tx the
	// transaction is then aborted.
	if _, err := db.Exec(ctx, migrateLockSQL+"; "+CreateTableSQL); err != nil {
		return fmt.Errorf("inbox: migrate: %w", err)
	}
	return nil
}

const insertSQL = `INSERT INTO processed_events (consumer, event_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`

// ErrEmptyConsumer is returned for an empty consumer name.
var ErrEmptyConsumer = errors.New("inbox: consumer name is empty")

// ErrNilEventID is returned for the zero UUID as event ID.
var ErrNilEventID = errors.New("inbox: event ID is the nil UUID")

// Process records that consumer processes eventID, in tx, and reports
// whether this is the first delivery: true means apply the event's effect
// in the same tx and commit; false means it was processed before (or is
// being processed by a transaction that then committed), so skip the
// effect. If tx rolls back, the record rolls back with it and a
// redelivery is processed again. A concurrent transaction recording the
// same (consumer, eventID) makes Process wait until that transaction ends.
// consumer names the consuming service (events are deduplicated per
// consumer); it must not be empty. Errors are wrapped as "inbox: ...".
func Process(ctx context.Context, tx pgx.Tx, consumer string, eventID uuid.UUID) (first bool, err error) {
	if consumer == "" {
		return false, ErrEmptyConsumer
	}
	if eventID == uuid.Nil {
		return false, ErrNilEventID
	}
	tag, err := tx.Exec(ctx, insertSQL, consumer, eventID)
	if err != nil {
		return false, fmt.Errorf("inbox: record event %s for %s: %w", eventID, consumer, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Handle runs effect in a new transaction on db, only if eventID was not
// processed by consumer before, and commits the effect together with the
// record of eventID. applied is true when effect ran and committed; false
// with a nil error means a redelivery was skipped (nothing written).
// effect must use only tx; if it returns an error, the transaction rolls
// back, nothing is recorded, and Handle returns the error (wrapped, so
// errors.Is works): the event will be processed again when redelivered.
// Other errors are wrapped as "inbox: ...".
func Handle(ctx context.Context, db Beginner, consumer string, eventID uuid.UUID, effect func(tx pgx.Tx) error) (applied bool, err error) {
	if effect == nil {
		return false, errors.New("inbox: effect is nil")
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("inbox: begin: %w", err)
	}
	defer func() {
		if !applied {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	first, err := Process(ctx, tx, consumer, eventID)
	if err != nil || !first {
		return false, err
	}
	if err := effect(tx); err != nil {
		return false, fmt.Errorf("inbox: effect of event %s: %w", eventID, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("inbox: commit: %w", err)
	}
	return true, nil
}

// HeaderEventID is the Kafka header that carries the event ID.
const HeaderEventID = "event_id"

// ErrNoEventID is returned by EventID when the message has no event_id
// header.
var ErrNoEventID = errors.New("inbox: message has no event_id header")

// EventID returns the event ID from a kafka-go message's headers: the
// value of the first "event_id" header (the relay writes it first, before
// the event's own headers), parsed as a UUID. It returns ErrNoEventID when
// there is none, or a parse error ("inbox: event_id header ...").
func EventID(headers []kafka.Header) (uuid.UUID, error) {
	for _, h := range headers {
		if h.Key == HeaderEventID {
			id, err := uuid.ParseBytes(h.Value)
			if err != nil {
				return uuid.Nil, fmt.Errorf("inbox: event_id header %q: %w", h.Value, err)
			}
			return id, nil
		}
	}
	return uuid.Nil, ErrNoEventID
}
