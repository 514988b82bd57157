package inbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"log"
	"os"
	"os/signal"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	// kafka-go's package is named kafka too; the alias keeps it apart
	// from github.com/pgoutbox/outbox/kafka, the relay's publisher.
	kafkago "github.com/segmentio/kafka-go"

	"github.com/pgoutbox/outbox/inbox"
)

// A kafka-go consumer that applies each payment event once, however often
// the relay delivers it. The offset is committed only after the effect
// (and the event ID) committed in PostgreSQL; a crash in between makes
// Kafka redeliver the message, and Handle skips it.
func ExampleHandle() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := inbox.Migrate(ctx, pool); err != nil {
		log.Fatal(err)
	}

	r := kafkago.NewReader(kafkago.ReaderConfig{
		Brokers: []string{"localhost:9092"},
		GroupID: "billing",
		Topic:   "payments",
	})
	defer r.Close()

	for {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return
			}
			log.Fatal(err)
		}
		id, err := inbox.EventID(m.Headers)
		if err != nil {
			log.Printf("skipping a message without a valid event_id: %v", err)
			_ = r.CommitMessages(ctx, m)
			continue
		}
		var p struct {
			Amount  int64  `json:"amount_cents"`
			Account string `json:"account"`
		}
		if err := json.Unmarshal(m.Value, &p); err != nil {
			log.Printf("event %s: bad payload: %v", id, err)
			_ = r.CommitMessages(ctx, m)
			continue
		}
		applied, err := inbox.Handle(ctx, pool, "billing", id, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "UPDATE accounts SET balance_cents = balance_cents + $1 WHERE id = $2", p.Amount, p.Account)
			return err
		})
		if err != nil {
			// Not committed: do not commit the offset; the message comes
			// again (here: after a restart).
			log.Fatalf("event %s: %v", id, err)
		}
		if !applied {
			log.Printf("event %s: duplicate delivery skipped", id)
		}
		if err := r.CommitMessages(ctx, m); err != nil {
			log.Fatal(err)
		}
	}
}
