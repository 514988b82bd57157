package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
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
	// Aggregate types of this run only, so that the routed topics
	// (outbox.event.<type>, Debezium's default) are new on a broker that
	// outlives one test run.
	run := strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	orderType, customerType := "Order"+run, "Customer"+run
	// The producers' own INSERTs, unchanged.
	for _, ins := range []struct {
		id              uuid.UUID
		typ, agg, event string
		payload         *string
	}{
		{order1, orderType, "order-1", "OrderCreated", ptr(`{"lineItems":[{"item":"Debezium in Action","qty":1}],"total":39.99}`)},
		{cust, customerType, "cust-7", "CustomerUpdated", ptr(`{"name":"Zoë"}`)},
		{order2, orderType, "order-1", "OrderDeleted", nil},
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
	orders := k.Consume(t, "outbox.event."+orderType, 2, 20*time.Second)
	customers := k.Consume(t, "outbox.event."+customerType, 1, 20*time.Second)
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("run exit %d: %s", code, stderr.String())
	}
	if len(orders) != 2 || len(customers) != 1 {
		t.Fatalf("routed %d Order and %d Customer records, want 2 and 1\n%s", len(orders), len(customers), stderr.String())
	}
	// The routed topics are new: the broker creates them
	// (--kafka-auto-create-topics), which is no outage.
	if strings.Contains(stderr.String(), "Kafka outage") {
		t.Errorf("publishing to topics the broker creates logged an outage:\n%s", stderr.String())
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

// createDebeziumTable creates outboxevent exactly as Debezium's Outbox
// Event Router documentation shows it, and adopts it with --debezium.
func createDebeziumTable(t *testing.T, db *testenv.TestDB) {
	t.Helper()
	if _, err := db.Pool.Exec(context.Background(), `CREATE TABLE outboxevent (
  id uuid NOT NULL,
  aggregatetype varchar(255) NOT NULL,
  aggregateid varchar(255) NOT NULL,
  type varchar(255) NOT NULL,
  payload jsonb,
  PRIMARY KEY (id)
)`); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runMain(t, context.Background(), "adopt", "--database-url", db.ConnString, "--table", "outboxevent", "--debezium"); code != 0 {
		t.Fatalf("adopt: %d %s", code, stderr)
	}
}

// jsonOf runs a command that prints JSON and decodes it.
func jsonOf(t *testing.T, args ...string) map[string]any {
	t.Helper()
	code, out, stderr := runMain(t, context.Background(), args...)
	var m map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &m) != nil {
		t.Fatalf("%v: exit %d, stdout %q, stderr %q", args, code, out, stderr)
	}
	return m
}

// TestCommandsReadAnAdoptedDebeziumTable: status, inspect and requeue take
// run's table, column and routing flags, and answer for the adopted table:
// the counts, the topic the relay routes an event to, and a requeue of the
// dead letter the relay's log line told the user to requeue.
func TestCommandsReadAnAdoptedDebeziumTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.DB(t)
	createDebeziumTable(t, db)
	order1, order2, cust, audit := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outboxevent (id, aggregatetype, aggregateid, type, payload, topic) VALUES
  ($1, 'Order', 'order-1', 'OrderCreated', '{}', NULL),
  ($2, 'Order', 'order-1', 'OrderPaid', '{}', NULL),
  ($3, 'Customer', 'cust-7', 'CustomerUpdated', '{}', NULL),
  ($4, 'Customer', 'cust-8', 'CustomerAudited', '{}', 'audit')`, order1, order2, cust, audit); err != nil {
		t.Fatal(err)
	}
	// order1 dead-lettered with --on-dead-letter=hold, as the relay leaves it.
	if _, err := db.Pool.Exec(ctx, `UPDATE outboxevent SET dead_lettered_at = now(), locked_until = 'infinity', attempts = 3,
  last_error = 'MESSAGE_TOO_LARGE' WHERE id = $1`, order1); err != nil {
		t.Fatal(err)
	}
	deb := []string{"--database-url", db.ConnString, "--table", "outboxevent", "--debezium"}
	cols := []string{"--database-url", db.ConnString, "--table", "outboxevent", "--column-aggregate-id", "aggregateid",
		"--column-event-type", "type", "--column-aggregate-type", "aggregatetype"}
	with := func(cmd string, base []string, args ...string) []string {
		return append(append([]string{cmd}, base...), args...)
	}

	s := jsonOf(t, with("status", deb, "--json")...)
	if u := s["unpublished"].(map[string]any); u["total"] != 3.0 || s["dead_letters"] != 1.0 || s["oldest_unpublished_event_id"] != order2.String() {
		t.Fatalf("status: %v; want 3 unpublished, 1 dead letter, oldest %s", s, order2)
	}

	// Inspect: the topic the relay sends each event to.
	for _, tc := range []struct {
		name           string
		args           []string
		topic, source  string
		state, aggType string
	}{
		{"routed by --debezium's template", with("inspect", deb, "--event-id", order1.String(), "--json"), "outbox.event.Order", "topic-template", "dead_lettered", "Order"},
		{"the row's own topic column", with("inspect", deb, "--event-id", audit.String(), "--json"), "audit", "column", "claimable", "Customer"},
		{"--topic-template", with("inspect", deb, "--event-id", cust.String(), "--json", "--topic-template", "cdc.${aggregatetype}.v1"), "cdc.Customer.v1", "topic-template", "claimable", "Customer"},
		{"--column-* and --topic", with("inspect", cols, "--event-id", cust.String(), "--json", "--topic", "unrouted"), "unrouted", "topic", "claimable", "Customer"},
	} {
		r := jsonOf(t, tc.args...)
		if r["topic"] != tc.topic || r["topic_source"] != tc.source || r["state"] != tc.state || r["aggregate_type"] != tc.aggType {
			t.Errorf("inspect, %s: topic %v (%v), state %v, aggregate type %v; want %s (%s), %s, %s", tc.name, r["topic"], r["topic_source"], r["state"], r["aggregate_type"], tc.topic, tc.source, tc.state, tc.aggType)
		}
	}
	code, out, stderr := runMain(t, ctx, with("inspect", deb, "--event-id", order1.String())...)
	if code != 0 || !regexp.MustCompile(`(?m)^  topic +outbox\.event\.Order \(routed by --topic-template outbox\.event\.\$\{aggregatetype\}, aggregate type Order\)$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^  aggregate_id +order-1$`).MatchString(out) ||
		!strings.Contains(out, "DEAD-LETTERED: not published; fix the cause, then `outbox-relay requeue --table outboxevent --debezium --event-id "+order1.String()+"`") {
		t.Errorf("inspect (text): exit %d\n%s%s", code, out, stderr)
	}

	// Requeue the dead letter, with the flags the relay runs with.
	code, out, stderr = runMain(t, ctx, with("requeue", deb, "--event-id", order1.String())...)
	if code != 0 || !strings.Contains(out, "requeued 1") {
		t.Fatalf("requeue --debezium: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	var parked int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM outboxevent WHERE dead_lettered_at IS NOT NULL OR locked_until IS NOT NULL OR attempts <> 0").Scan(&parked); err != nil || parked != 0 {
		t.Fatalf("%d rows still parked after requeue (%v)", parked, err)
	}
	code, out, stderr = runMain(t, ctx, with("requeue", cols, "--all-dead-letters")...)
	if code != 0 || !strings.Contains(out, "requeued 0") {
		t.Fatalf("requeue --column-*: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	s = jsonOf(t, with("status", cols, "--json")...)
	if u := s["unpublished"].(map[string]any); u["total"] != 4.0 || s["dead_letters"] != 0.0 || s["oldest_unpublished_event_id"] != order1.String() {
		t.Fatalf("status after requeue: %v; want 4 unpublished, no dead letter, oldest %s", s, order1)
	}
	// Without the column flags the table's columns are not found: named.
	code, _, stderr = runMain(t, ctx, "requeue", "--database-url", db.ConnString, "--table", "outboxevent", "--all-dead-letters")
	if code != exitFailure || !strings.Contains(stderr, "--column-") || !strings.Contains(stderr, "--debezium") {
		t.Fatalf("requeue without --debezium: exit %d, stderr %q; want exit 1 naming --debezium and --column-*", code, stderr)
	}
}
