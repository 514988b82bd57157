// Package outboxtest helps an application's own tests check what its code
// writes to the outbox and how it wires the relay, against a real
// PostgreSQL and without Kafka, as River's rivertest does for River jobs.
//
//	func TestCaptureWritesTheEvent(t *testing.T) {
//		pool := outboxtest.Schema(t, os.Getenv("DATABASE_URL")) // a schema of this test's own, with the outbox table
//		if err := capture(t.Context(), pool, "pay_1"); err != nil { // the code under test: its change and outbox.Add in one transaction
//			t.Fatal(err)
//		}
//		ev := outboxtest.RequireAdded[PaymentCaptured](t, pool, outboxtest.Expect{Type: "payment.captured", AggregateID: "pay_1"})
//		if ev.Payload.Amount != "12.50" {
//			t.Errorf("amount %q", ev.Payload.Amount)
//		}
//	}
//
// Three parts:
//
//   - Schema creates, for one test, a schema with the migrated outbox table
//     (sql.Migrate) and returns a pool bound to it; parallel tests each get
//     their own, and it is dropped when the test ends.
//   - RequireAdded, RequireAddedTx and RequireNotAdded read the outbox table
//     (committed rows through a pool, or the rows a transaction sees),
//     select events by Expect and decode payloads into the test's type.
//   - Publisher records what the relay publishes instead of sending it to
//     Kafka: relay.New takes it as it is, relay.NewService through
//     Publisher.ServiceConfig.
//
// Everything here is for tests: failures are reported through the
// testing.TB given.
//
// The package is public because applications' own tests import it, as
// rivertest is public in River.
package outboxtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

// setupTimeout bounds creating, migrating and dropping a schema.
const setupTimeout = 2 * time.Minute

// migrateLockID is the PostgreSQL advisory lock key ("outbxtst" in ASCII)
// that Schema holds while it migrates, so that parallel tests queue for
// it: goose's own migration lock is retried only every second. The
// module's internal test environment uses the same key.
const migrateLockID int64 = 0x6f757462787473

// Schema creates a schema of t's own in the database connString names (a
// URL or keyword/value connection string; the role must be allowed to
// create schemas), applies the outbox migrations there (sql.Migrate: the
// table "outbox", its indexes, row checks and migration history), and
// returns a pool whose connections have search_path set to that schema
// alone, so that outbox.Add, a relay.Service on the pool and the test's
// own statements see only this test's table. The schema is named
// "outboxtest_" plus 16 hex digits. When t ends the pool is closed and the
// schema dropped with CASCADE. Safe for parallel tests; NOTIFY channels
// are per database, so relays of parallel tests may wake each other
// (harmless: a wake-up is only a claim). It fails t (Fatalf) when
// connString is empty or the database refuses.
func Schema(t testing.TB, connString string) *pgxpool.Pool {
	t.Helper()
	if strings.TrimSpace(connString) == "" {
		t.Fatalf("outboxtest: Schema: empty connection string (point it at a test database, e.g. os.Getenv(\"DATABASE_URL\"))")
	}
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		t.Fatalf("outboxtest: Schema: %v", err)
	}
	schema := "outboxtest_" + randHex(8)
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	admin, err := pgx.ConnectConfig(ctx, cfg.ConnConfig.Copy())
	if err != nil {
		t.Fatalf("outboxtest: Schema: connect: %v", err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("outboxtest: Schema: create schema %s: %v", schema, err)
	}
	drop := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		defer cancel()
		conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig.Copy())
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		_, err = conn.Exec(ctx, "SET lock_timeout = '30s'; DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		return err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		_ = drop()
		t.Fatalf("outboxtest: Schema: connect: %v", err)
	}
	t.Cleanup(func() {
		pool.Close()
		if err := drop(); err != nil {
			t.Errorf("outboxtest: drop schema %s: %v", schema, err)
		}
	})
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock($1)", migrateLockID); err != nil {
		t.Fatalf("outboxtest: Schema: migration lock: %v", err)
	}
	_, err = outboxsql.Migrate(ctx, pool)
	_, _ = admin.Exec(ctx, "SELECT pg_advisory_unlock($1)", migrateLockID)
	if err != nil {
		t.Fatalf("outboxtest: Schema %s: %v", schema, err)
	}
	return pool
}

// Querier is what the Require functions read the outbox table through:
// *pgxpool.Pool, *pgxpool.Conn, *pgx.Conn and pgx.Tx satisfy it.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Expect selects the events a Require function looks for: an event matches
// when every non-empty field below equals its own. The zero Expect matches
// every event.
type Expect struct {
	// AggregateID is the event's aggregate ID (the Kafka key).
	AggregateID string
	// Type is the event's type (outbox.Event.Type).
	Type string
	// Topic is the topic the event names itself (outbox.Event.Topic); it
	// does not match events that leave the topic to the relay.
	Topic string
	// Headers must each be among the event's own headers with this value;
	// the event may carry others (e.g. traceparent).
	Headers map[string]string
	// Table is the outbox table to read, optionally schema-qualified.
	// Defaults to "outbox".
	Table string
}

func (e Expect) matches(r row) bool {
	if (e.AggregateID != "" && r.aggregateID != e.AggregateID) || (e.Type != "" && r.eventType != e.Type) || (e.Topic != "" && r.topic != e.Topic) {
		return false
	}
	for k, v := range e.Headers {
		if got, ok := r.headers[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func (e Expect) String() string {
	var parts []string
	add := func(name, v string) {
		if v != "" {
			parts = append(parts, fmt.Sprintf("%s %q", name, v))
		}
	}
	add("type", e.Type)
	add("aggregate", e.AggregateID)
	add("topic", e.Topic)
	if len(e.Headers) > 0 {
		parts = append(parts, fmt.Sprintf("headers %v", e.Headers))
	}
	if len(parts) == 0 {
		return "any event"
	}
	return strings.Join(parts, ", ")
}

// Event is an event found in the outbox table, its payload decoded into T.
type Event[T any] struct {
	// ID is the event ID (the Kafka header event_id).
	ID uuid.UUID
	// Seq is the row's insert order in the table.
	Seq int64
	// AggregateID, Type and Topic are the row's columns; Topic is "" when
	// the relay chooses the topic.
	AggregateID, Type, Topic string
	// Headers are the row's own headers (nil when it has none).
	Headers map[string]string
	// Payload is the payload decoded into T with encoding/json.
	Payload T
	// RawPayload is the payload as PostgreSQL prints it back from jsonb
	// ({"a": 1}), or null.
	RawPayload json.RawMessage
	// CreatedAt is the inserting transaction's start (database clock).
	CreatedAt time.Time
	// PublishedAt is when the relay marked it published; nil while it is
	// not.
	PublishedAt *time.Time
}

// RequireAdded reads the committed outbox table through db (a pool or a
// connection) and returns the one event that matches expect, its payload
// decoded into T. It fails t (Fatalf) when no event or more than one
// matches, naming the events the table holds, or when the payload does not
// decode into T.
func RequireAdded[T any](t testing.TB, db Querier, expect Expect) *Event[T] {
	t.Helper()
	return requireOne[T](t, db, expect, "")
}

// RequireAddedTx is RequireAdded through the caller's transaction: it sees
// the events tx added and has not committed yet, so a test can check them
// before deciding to commit or roll back.
func RequireAddedTx[T any](t testing.TB, tx pgx.Tx, expect Expect) *Event[T] {
	t.Helper()
	return requireOne[T](t, tx, expect, " (in the transaction)")
}

// RequireNotAdded fails t (Fatalf) when an event in the outbox table, as
// db sees it (a pool, a connection or a transaction), matches expect,
// naming the events that match.
func RequireNotAdded(t testing.TB, db Querier, expect Expect) {
	t.Helper()
	rows := readTable(t, db, expect.Table)
	var found []row
	for _, r := range rows {
		if expect.matches(r) {
			found = append(found, r)
		}
	}
	if len(found) > 0 {
		t.Fatalf("outboxtest: want no event matching %s, found %d: %s", expect, len(found), describe(found))
	}
}

func requireOne[T any](t testing.TB, db Querier, expect Expect, where string) *Event[T] {
	t.Helper()
	rows := readTable(t, db, expect.Table)
	var found []row
	for _, r := range rows {
		if expect.matches(r) {
			found = append(found, r)
		}
	}
	if len(found) != 1 {
		t.Fatalf("outboxtest: want 1 event matching %s%s, found %d; the table holds %d: %s", expect, where, len(found), len(rows), describe(rows))
	}
	r := found[0]
	ev := &Event[T]{ID: r.id, Seq: r.seq, AggregateID: r.aggregateID, Type: r.eventType, Topic: r.topic,
		Headers: r.headers, RawPayload: r.payload, CreatedAt: r.createdAt, PublishedAt: r.publishedAt}
	if err := json.Unmarshal(r.payload, &ev.Payload); err != nil {
		t.Fatalf("outboxtest: the payload of event %s (seq %d, %s) does not decode into %T: %v; payload %s", r.id, r.seq, r.eventType, ev.Payload, err, r.payload)
	}
	return ev
}

// row is one event row as the Require functions read it.
type row struct {
	id                            uuid.UUID
	seq                           int64
	aggregateID, eventType, topic string
	headers                       map[string]string
	payload                       json.RawMessage
	createdAt                     time.Time
	publishedAt                   *time.Time
}

// readTable reads every event of table ("" is "outbox") in seq order.
func readTable(t testing.TB, db Querier, table string) []row {
	t.Helper()
	if table == "" {
		table = outbox.DefaultTable
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rs, err := db.Query(ctx, `SELECT id::text, seq, aggregate_id, event_type, coalesce(topic, ''), headers::text,
  coalesce(payload::text, 'null'), created_at, published_at FROM `+outbox.TableIdentifier(table)+` ORDER BY seq`)
	if err != nil {
		t.Fatalf("outboxtest: read %s: %v", table, err)
	}
	defer rs.Close()
	var out []row
	for rs.Next() {
		var r row
		var id string
		var headers *string
		var payload string
		if err := rs.Scan(&id, &r.seq, &r.aggregateID, &r.eventType, &r.topic, &headers, &payload, &r.createdAt, &r.publishedAt); err != nil {
			t.Fatalf("outboxtest: read %s: %v", table, err)
		}
		if r.id, err = uuid.Parse(id); err != nil {
			t.Fatalf("outboxtest: read %s: event ID %q: %v", table, id, err)
		}
		if headers != nil {
			if err := json.Unmarshal([]byte(*headers), &r.headers); err != nil {
				t.Fatalf("outboxtest: read %s: headers of seq %d: %v", table, r.seq, err)
			}
		}
		r.payload = json.RawMessage(payload)
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		t.Fatalf("outboxtest: read %s: %v", table, err)
	}
	return out
}

// describe lists rows for a failure message: at most 20.
func describe(rows []row) string {
	if len(rows) == 0 {
		return "none"
	}
	var b strings.Builder
	for i, r := range rows {
		if i == 20 {
			fmt.Fprintf(&b, "; and %d more", len(rows)-i)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "seq %d type %q aggregate %q", r.seq, r.eventType, r.aggregateID)
		if r.topic != "" {
			fmt.Fprintf(&b, " topic %q", r.topic)
		}
		if len(r.headers) > 0 {
			fmt.Fprintf(&b, " headers %v", r.headers)
		}
	}
	return b.String()
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
