package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/exampletb"
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
// PostgreSQL (an empty schema: runRelay creates the table) and the test
// broker: an event written with outbox.Add is published to
// "payments".
func TestReadmeExampleRuns(t *testing.T) {
	t.Parallel()
	db, k := testenv.DB(t), testenv.Kafka(t) // runRelay creates the table
	k.NamedTopic(t, "payments", 1)
	// "payments" may be shared with other tests (and earlier runs) on a
	// real broker: read only what comes after now.
	from := k.EndOffsets(t, "payments")
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
	rec, ok := k.FindFrom(t, "payments", from, 20*time.Second, func(r testenv.Record) bool { return r.Headers["event_id"] == id.String() })
	if !ok {
		t.Fatalf("the event %s did not reach payments within 20s", id)
	}
	if string(rec.Key) != "pay_123" || rec.Headers["event_type"] != "payment.captured" {
		t.Fatalf("payments got %+v", rec)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("runRelay: %v", err)
	}
}

// exampleEnv gives an Example the test environment (internal/testenv): an
// empty database schema and the test's Kafka broker with the topic
// "payments"; read returns the first record of that topic written after
// exampleEnv returned whose event is in the example's own outbox table
// (a real broker is shared by every package's tests, several of which
// write to "payments"), as "key event_type value". done stops and
// removes them.
func exampleEnv(name string) (pool *pgxpool.Pool, brokers []string, read func() string, done func()) {
	tb := exampletb.New(name)
	db, k := testenv.DB(tb), testenv.Kafka(tb)
	k.NamedTopic(tb, "payments", 1)
	from := k.EndOffsets(tb, "payments")
	read = func() string {
		r, ok := k.FindFrom(tb, "payments", from, 30*time.Second, func(r testenv.Record) bool {
			var mine bool
			err := db.Pool.QueryRow(context.Background(), "SELECT EXISTS (SELECT 1 FROM outbox WHERE id::text = $1)", r.Headers["event_id"]).Scan(&mine)
			return err == nil && mine
		})
		if !ok {
			return "no record of this example's within 30s"
		}
		return fmt.Sprintf("%s %s %s", r.Key, r.Headers["event_type"], r.Value)
	}
	return db.Pool, k.Brokers, read, tb.Done
}

// NewService runs the relay inside your own process: here it publishes
// one event to Kafka and stops when ctx ends.
func ExampleNewService() {
	pool, brokers, readRecord, done := exampleEnv("ExampleNewService") // a database and a Kafka broker
	defer done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The table first: Run returns at once, naming it, when it is missing.
	if _, err := outboxsql.Migrate(ctx, pool); err != nil {
		log.Fatal(err)
	}
	svc, err := relay.NewService(pool, relay.ServiceConfig{
		Relay: relay.Config{Topic: "payments"}, // events whose row names no topic
		Kafka: kafka.Config{Brokers: brokers},
	}, zap.NewNop())
	if err != nil {
		log.Fatal(err) // a *outbox.FieldError names the bad field
	}
	stopped := make(chan error, 1)
	go func() { stopped <- svc.Run(ctx) }()

	err = outbox.Add(ctx, pool, outbox.Event{AggregateID: "pay_123", Type: "payment.captured", Payload: json.RawMessage(`{"amount":"12.50"}`)})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(readRecord()) // what a consumer of "payments" receives

	cancel() // a graceful stop: delivered rows are marked, the rest released
	if err := <-stopped; err != nil {
		log.Fatal(err)
	}
	fmt.Println("stopped; published:", svc.Relay().Stats().Published)
	// Output:
	// pay_123 payment.captured {"amount": "12.50"}
	// stopped; published: 1
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
