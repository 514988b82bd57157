package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/outbox/internal/testenv"
)

// A table created exactly as Debezium's Outbox Event Router documentation
// shows, written by producers that only know Debezium, relayed with
// --debezium: routing by aggregatetype into outbox.event.<type>, key
// aggregateid, header id, and a tombstone for a NULL payload.
func TestDebeziumOutboxTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.DB(t)
	k := testenv.Kafka(t)
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE outboxevent (
  id uuid NOT NULL,
  aggregatetype varchar(255) NOT NULL,
  aggregateid varchar(255) NOT NULL,
  type varchar(255) NOT NULL,
  payload jsonb,
  PRIMARY KEY (id)
)`); err != nil {
		t.Fatal(err)
	}
	// Adopting it twice is harmless.
	for i := 0; i < 2; i++ {
		if code, out, stderr := runMain(t, ctx, "adopt", "--database-url", db.ConnString, "--table", "outboxevent", "--debezium"); code != 0 || !strings.Contains(out, "ready") {
			t.Fatalf("adopt: %d %q %q", code, out, stderr)
		}
	}
	order1, order2, cust := uuid.New(), uuid.New(), uuid.New()
	// The producers' own INSERTs, unchanged.
	for _, ins := range []struct {
		id              uuid.UUID
		typ, agg, event string
		payload         *string
	}{
		{order1, "Order", "order-1", "OrderCreated", ptr(`{"lineItems":[{"item":"Debezium in Action","qty":1}],"total":39.99}`)},
		{cust, "Customer", "cust-7", "CustomerUpdated", ptr(`{"name":"Zoë"}`)},
		{order2, "Order", "order-1", "OrderDeleted", nil},
	} {
		if _, err := db.Pool.Exec(ctx, "INSERT INTO outboxevent (id, aggregatetype, aggregateid, type, payload) VALUES ($1, $2, $3, $4, $5)", ins.id, ins.typ, ins.agg, ins.event, ins.payload); err != nil {
			t.Fatal(err)
		}
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan int, 1)
	var stderr bytes.Buffer
	go func() {
		var stdout bytes.Buffer
		done <- Main(rctx, []string{"run", "--database-url", db.ConnString, "--brokers", k.Brokers[0],
			"--table", "outboxevent", "--debezium", "--topic", "unrouted", "--kafka-auto-create-topics",
			"--metrics-addr", "", "--startup-wait", "10s", "--log-level", "warn"}, &stdout, &stderr)
	}()
	orders := k.Consume(t, "outbox.event.Order", 2, 20*time.Second)
	customers := k.Consume(t, "outbox.event.Customer", 1, 20*time.Second)
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("run exit %d: %s", code, stderr.String())
	}
	if len(orders) != 2 || len(customers) != 1 {
		t.Fatalf("routed %d Order and %d Customer records, want 2 and 1\n%s", len(orders), len(customers), stderr.String())
	}
	first, second := orders[0], orders[1]
	if string(first.Key) != "order-1" || first.Headers["id"] != order1.String() || first.Headers["event_type"] != "OrderCreated" ||
		!strings.Contains(string(first.Value), "Debezium in Action") {
		t.Fatalf("first Order record: key %q headers %v value %s", first.Key, first.Headers, first.Value)
	}
	if second.Headers["id"] != order2.String() || second.Value != nil {
		t.Fatalf("NULL payload must be a tombstone: headers %v value %q", second.Headers, second.Value)
	}
	if c := customers[0]; string(c.Key) != "cust-7" || c.Headers["id"] != cust.String() || !strings.Contains(string(c.Value), "Zoë") {
		t.Fatalf("Customer record: key %q headers %v value %s", c.Key, c.Headers, c.Value)
	}
	var unpublished int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM outboxevent WHERE published_at IS NULL").Scan(&unpublished); err != nil || unpublished != 0 {
		t.Fatalf("%d rows unpublished (%v)", unpublished, err)
	}
}

func ptr(s string) *string { return &s }
