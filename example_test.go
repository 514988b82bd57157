package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/exampletb"
	"github.com/pgoutbox/outbox/internal/testenv"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

// exampleDB gives an Example the test database (internal/testenv): a
// schema of its own, as the pool's only search_path entry, with the outbox
// table when migrated is true. done drops it.
func exampleDB(name string, migrated bool) (pool *pgxpool.Pool, done func()) {
	tb := exampletb.New(name)
	if migrated {
		return testenv.MigratedDB(tb).Pool, tb.Done
	}
	return testenv.DB(tb).Pool, tb.Done
}

// Add writes the event in the transaction of the business change: it
// exists once the transaction commits, and never if it rolls back.
func ExampleAdd() {
	ctx := context.Background()
	pool, done := exampleDB("ExampleAdd", true) // a database with the outbox table (sql.Migrate)
	defer done()

	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx) // a no-op after Commit
	// ... the business change on tx, then its event:
	err = outbox.Add(ctx, tx, outbox.Event{
		ID:          outbox.NewID(), // consumers dedupe on it
		AggregateID: "pay_123",      // the Kafka key: one aggregate, one partition, in order
		Type:        "payment.captured",
		Payload:     json.RawMessage(`{"amount":"12.50","currency":"EUR"}`),
		Headers:     map[string]string{"tenant": "acme"},
	})
	if err != nil {
		log.Fatal(err) // a *outbox.ValidationError names the bad field; nothing was written
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}

	var aggregate, typ, payload, headers string
	err = pool.QueryRow(ctx, "SELECT aggregate_id, event_type, payload::text, headers::text FROM outbox").Scan(&aggregate, &typ, &payload, &headers)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(aggregate, typ, payload, headers)
	// Output: pay_123 payment.captured {"amount": "12.50", "currency": "EUR"} {"tenant": "acme"}
}

// A Writer of its own writes to another table (created here by
// sql.MigrateTable), notifies another channel (the relay's --channel) and
// bounds the records it accepts.
func ExampleNewWriter() {
	ctx := context.Background()
	pool, done := exampleDB("ExampleNewWriter", false) // an empty database
	defer done()

	if _, err := outboxsql.MigrateTable(ctx, pool, "billing_events"); err != nil {
		log.Fatal(err)
	}
	w, err := outbox.NewWriter(outbox.WriterConfig{
		Table:          "billing_events", // outbox-relay run --table billing_events
		Channel:        "billing_events", // outbox-relay run --channel billing_events
		MaxRecordBytes: 200,              // key, headers and payload, as the relay will publish them
	})
	if err != nil {
		log.Fatal(err) // a *outbox.FieldError names the bad field
	}
	// A pool, not a transaction: the events commit on their own, both or
	// neither, inserted in this order.
	err = w.Add(ctx, pool,
		outbox.Event{AggregateID: "invoice-9", Type: "invoice.issued", Payload: json.RawMessage(`{"total":"99.00"}`)},
		outbox.Event{AggregateID: "invoice-9", Type: "invoice.paid", Payload: json.RawMessage(`{}`)},
	)
	if err != nil {
		log.Fatal(err)
	}
	err = w.Add(ctx, pool, outbox.Event{AggregateID: "invoice-9", Type: "invoice.pdf", Payload: json.RawMessage(`"` + strings.Repeat("x", 300) + `"`)})
	var ve *outbox.ValidationError
	if errors.As(err, &ve) {
		fmt.Println("refused:", ve.Field)
	}

	rows, err := pool.Query(ctx, "SELECT aggregate_id, event_type FROM billing_events ORDER BY seq")
	if err != nil {
		log.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var aggregate, typ string
		if err := rows.Scan(&aggregate, &typ); err != nil {
			log.Fatal(err)
		}
		fmt.Println(aggregate, typ)
	}
	if err := rows.Err(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// refused: Payload
	// invoice-9 invoice.issued
	// invoice-9 invoice.paid
}
