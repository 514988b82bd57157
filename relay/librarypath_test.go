package relay_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/kafka"
	"github.com/pgoutbox/outbox/lease"
	"github.com/pgoutbox/outbox/relay"
)

// NewService refuses an empty Topic, naming relay.Config.Topic, unless a
// TopicTemplate routes the events. Nothing is connected to: the pool's
// address accepts no connection.
func TestNewServiceRefusesAnEmptyTopic(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	_, err = relay.NewService(pool, relay.ServiceConfig{Kafka: kafka.Config{Brokers: []string{"127.0.0.1:1"}}}, nil)
	var fe *outbox.FieldError
	if !errors.As(err, &fe) || fe.Component != "relay" || fe.Field != "Topic" || !strings.HasPrefix(err.Error(), "relay: Config.Topic: required") {
		t.Fatalf("NewService without a topic: %v; want a *outbox.FieldError naming relay Config.Topic", err)
	}
	svc, err := relay.NewService(pool, relay.ServiceConfig{
		Relay: relay.Config{TopicTemplate: "outbox.event.${aggregatetype}"},
		Lease: lease.Config{Columns: lease.Columns{AggregateType: "aggregatetype"}},
		Kafka: kafka.Config{Brokers: []string{"127.0.0.1:1"}},
	}, nil)
	if err != nil {
		t.Fatalf("NewService with a TopicTemplate and no Topic: %v", err)
	}
	_ = svc.Close()
}

// Run on a database without the outbox table returns at once an error
// naming the table and sql.Migrate, as `outbox-relay run` exits; it does
// not log and retry claims forever.
func TestServiceRunFailsFastOnAMissingTable(t *testing.T) {
	t.Parallel()
	db, k := testenv.DB(t), testenv.Kafka(t) // no migration
	svc, err := relay.NewService(db.Pool, relay.ServiceConfig{
		Relay: relay.Config{Topic: "payments"},
		Kafka: kafka.Config{Brokers: k.Brokers},
	}, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = svc.Run(ctx)
	if err == nil || ctx.Err() != nil {
		t.Fatalf("Run on a database without the table: %v (ctx: %v); want an error at once", err, ctx.Err())
	}
	if !claim.IsMissingTable(err) || !strings.Contains(err.Error(), `outbox table "outbox" not found`) || !strings.Contains(err.Error(), "sql.Migrate") {
		t.Fatalf("Run: %v; want a missing-table error naming the table and sql.Migrate", err)
	}
}
