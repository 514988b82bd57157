package relay_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/kafka"
	"github.com/pgoutbox/outbox/relay"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

// README: begin runRelay
// runRelay runs the outbox relay inside your service until ctx ends:
// LISTEN on "outbox", claim, publish to Kafka, mark; it stops gracefully.
func runRelay(ctx context.Context, pool *pgxpool.Pool, brokers []string, log *zap.Logger) error {
	// Create or upgrade the outbox table (safe to run twice or concurrently;
	// or run `outbox-relay migrate`). Without it, Run returns at once.
	if _, err := outboxsql.Migrate(ctx, pool); err != nil {
		return err
	}
	svc, err := relay.NewService(pool, relay.ServiceConfig{
		Relay: relay.Config{Topic: "payments"}, // more: relay.Config's fields
		Kafka: kafka.Config{Brokers: brokers},
	}, log)
	if err != nil {
		return err // a *outbox.FieldError names the bad field
	}
	return svc.Run(ctx) // returns once the relay, its listener and publisher stopped
}

// README: end runRelay

// TestReadmeExampleRuns runs the README's example against the test
// PostgreSQL (an empty schema: runRelay creates the table) and the
// in-process broker: an event written with outbox.Add is published to
// "payments".
func TestReadmeExampleRuns(t *testing.T) {
	t.Parallel()
	db, k := testenv.DB(t), testenv.Kafka(t) // runRelay creates the table
	k.NamedTopic(t, "payments", 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runRelay(ctx, db.Pool, k.Brokers, testenv.Logger(t)) }()
	testenv.Eventually(t, 30*time.Second, func() bool {
		var exists bool
		err := db.Pool.QueryRow(ctx, "SELECT to_regclass('outbox') IS NOT NULL").Scan(&exists)
		return err == nil && exists
	}, "runRelay did not create the outbox table")
	id := outbox.NewID()
	if err := outbox.Add(ctx, db.Pool, outbox.Event{ID: id, AggregateID: "pay_123", Type: "payment.captured", Payload: json.RawMessage(`{"amount":"12.50"}`)}); err != nil {
		t.Fatal(err)
	}
	recs := k.Consume(t, "payments", 1, 20*time.Second)
	if len(recs) != 1 || recs[0].Headers["event_id"] != id.String() {
		t.Fatalf("payments holds %v, want the event %s", recs, id)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("runRelay: %v", err)
	}
}

// TestReadmeShowsTheExample keeps the README's "Run the relay inside your
// Go service" code the same as runRelay above, which TestReadmeExampleRuns
// runs.
func TestReadmeShowsTheExample(t *testing.T) {
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	begin := strings.Index(s, "// README: begin runRelay\n") + len("// README: begin runRelay\n")
	end := strings.Index(s, "\n// README: end runRelay")
	code := s[begin:end]
	if n := strings.Count(code, "\n") + 1; n > 20 {
		t.Errorf("the example is %d lines; the README promises 20 or fewer", n)
	}
	if !strings.Contains(string(readme), code) {
		t.Errorf("README.md does not contain the example verbatim:\n%s", code)
	}
}
