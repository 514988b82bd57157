package faults

// Rows that cannot be published are parked at once, each by itself, and
// nothing stalls their neighbours; rows of adopted tables are published as
// their users expect (any id type, bytea payloads); a failing broker does
// not flood the log.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/lease"
	"github.com/pgoutbox/outbox/relay"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

// ipDebeziumTable creates a Debezium-shaped outbox table named table whose
// id column has type idType and payload column payloadType, and adopts it.
func ipDebeziumTable(t *testing.T, db *testenv.TestDB, table, idType, payloadType string) {
	t.Helper()
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (
  id %s NOT NULL PRIMARY KEY,
  aggregatetype varchar(255) NOT NULL,
  aggregateid varchar(255) NOT NULL,
  type varchar(255) NOT NULL,
  payload %s)`, table, idType, payloadType)); err != nil {
		t.Fatal(err)
	}
	if err := outboxsql.AdoptTable(ctx, db.Pool, table, outboxsql.AdoptColumns{AggregateID: "aggregateid", EventType: "type"}); err != nil {
		t.Fatal(err)
	}
}

// ipRecordsByID reads n records of topic and indexes them by event_id.
func ipRecordsByID(t *testing.T, k *testenv.TestKafka, topic string, n int) map[string]*kgo.Record {
	t.Helper()
	out := map[string]*kgo.Record{}
	for _, r := range ipRawRecords(t, k, topic, n, 20*time.Second) {
		for _, v := range ipHeaderValues(r, "event_id") {
			out[v] = r
		}
	}
	return out
}

// TestInprocAdoptedTablesWithTextAndBigintIDsAndAPoisonRow: adopted
// Debezium tables whose id column is varchar (with a value that is not a
// UUID) or bigint are relayed, the id in event_id and in Debezium's id
// header as text. A row whose headers are not a JSON object (written before
// the row checks) is dead-lettered by itself with the reason; the
// rows claimed with it, of other aggregates, are published. Before, each
// claim failed scanning the id ("invalid UUID length: 16") once per lease,
// forever, and no row of the batch was published.
func TestInprocAdoptedTablesWithTextAndBigintIDsAndAPoisonRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	for _, tc := range []struct {
		table, idType string
		ids           []string
	}{
		{"events_text", "varchar(64)", []string{"order-42-created", "0192f3a4-5b6c-7d8e-9f00-112233445566", "12345", "order-42-paid"}},
		{"events_bigint", "bigint", []string{"1", "9007199254740993", "42", "7"}},
	} {
		t.Run(tc.table, func(t *testing.T) {
			ipDebeziumTable(t, db, tc.table, tc.idType, "jsonb")
			// The poison row: headers that are not an object, as a plain
			// SQL writer could store them before the row checks existed.
			if _, err := db.Pool.Exec(ctx, "ALTER TABLE "+tc.table+" DISABLE TRIGGER "+tc.table+"_row_checks"); err != nil {
				t.Fatal(err)
			}
			for i, id := range tc.ids {
				headers := `{"tenant": "acme"}`
				if i == 1 {
					headers = `["not", "an", "object"]`
				}
				if _, err := db.Pool.Exec(ctx, "INSERT INTO "+tc.table+` (id, aggregatetype, aggregateid, type, payload, headers)
VALUES ($1, 'order', $2, 'order.event', $3::jsonb, $4::jsonb)`, id, fmt.Sprintf("agg-%d", i), fmt.Sprintf(`{"n": %d}`, i), headers); err != nil {
					t.Fatal(err)
				}
			}
			topic := k.Topic(t, 2)
			h := ipStartRelay(t, db, k.Brokers, topic, ipConfig{NoNotify: true,
				Relay: relay.Config{PollInterval: 50 * time.Millisecond, TopicTemplate: topic + ".${aggregatetype}", IDHeader: "id"},
				Lease: lease.Config{Table: tc.table, Columns: lease.DebeziumColumns}})
			routed := k.NamedTopic(t, topic+".order", 2)
			testenv.Eventually(t, 20*time.Second, func() bool {
				return ipCount(t, db.Pool, "SELECT count(*) FROM "+tc.table+" WHERE published_at IS NULL AND dead_lettered_at IS NULL") == 0
			}, "rows not published (stats %+v)", h.Relay.Stats())
			var lastErr string
			var attempts int
			if err := db.Pool.QueryRow(ctx, "SELECT coalesce(last_error, ''), attempts FROM "+tc.table+" WHERE id = $1 AND dead_lettered_at IS NOT NULL", tc.ids[1]).Scan(&lastErr, &attempts); err != nil {
				t.Fatalf("the poison row %s is not dead-lettered: %v", tc.ids[1], err)
			}
			if !strings.Contains(lastErr, "headers") || !strings.Contains(lastErr, "not") {
				t.Errorf("poison row's last_error %q does not say its headers are bad", lastErr)
			}
			recs := ipRecordsByID(t, k, routed, len(tc.ids)-1)
			for i, id := range tc.ids {
				r := recs[id]
				switch {
				case i == 1 && r != nil:
					t.Errorf("the poison row %s was published", id)
				case i == 1:
				case r == nil:
					t.Errorf("row %s not on %s", id, routed)
				case string(r.Key) != fmt.Sprintf("agg-%d", i) || len(ipHeaderValues(r, "id")) != 1 || ipHeaderValues(r, "id")[0] != id ||
					len(ipHeaderValues(r, "tenant")) != 1:
					t.Errorf("row %s published as key %q headers %v", id, r.Key, r.Headers)
				}
			}
			t.Logf("%s: %d rows published with their %s ids as text; the poison row dead-lettered after %d attempt(s): %s",
				tc.table, len(tc.ids)-1, tc.idType, attempts, lastErr)
		})
	}
}

// TestInprocByteaPayloadPublishedRaw: an adopted table whose payload column
// is bytea (Avro or Protobuf writers): the record value is the raw bytes,
// not their hex text. A text payload is its characters; json as written.
func TestInprocByteaPayloadPublishedRaw(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	for _, tc := range []struct {
		typ, literal string
		want         []byte
	}{
		{"bytea", `'\x00010203ff'::bytea`, []byte{0, 1, 2, 3, 0xff}},
		{"text", `'plain text ü'`, []byte("plain text ü")},
		{"json", `'{"b":1,  "a":2}'::json`, []byte(`{"b":1,  "a":2}`)},
	} {
		t.Run(tc.typ, func(t *testing.T) {
			table := "payload_" + tc.typ
			ipDebeziumTable(t, db, table, "uuid", tc.typ)
			if _, err := db.Pool.Exec(ctx, "INSERT INTO "+table+` (id, aggregatetype, aggregateid, type, payload)
VALUES (gen_random_uuid(), 't', 'agg', 'x', `+tc.literal+")"); err != nil {
				t.Fatal(err)
			}
			topic := k.Topic(t, 1)
			ipStartRelay(t, db, k.Brokers, topic, ipConfig{NoNotify: true, Relay: relay.Config{PollInterval: 50 * time.Millisecond},
				Lease: lease.Config{Table: table, Columns: lease.DebeziumColumns}})
			recs := ipRawRecords(t, k, topic, 1, 20*time.Second)
			if len(recs) != 1 || string(recs[0].Value) != string(tc.want) {
				t.Fatalf("%s payload published as %q, want %q", tc.typ, recs[0].Value, tc.want)
			}
		})
	}
}

// TestInprocIllegalTopicDeadLetteredAtOnce: a routed topic name Kafka can
// never accept (aggregatetype 'Order Line' with --topic-template
// outbox.event.${aggregatetype}), and a row's illegal topic column ('bad
// topic!', from before the row checks): each is dead-lettered at once
// with a last_error that says the name is illegal, holding only its own
// aggregate's later events, while the others flow. Before: retried 16 times
// as UNKNOWN_TOPIC_OR_PARTITION, for minutes.
func TestInprocIllegalTopicDeadLetteredAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	ipDebeziumTable(t, db, "routed", "uuid", "jsonb")
	if _, err := db.Pool.Exec(ctx, "ALTER TABLE routed DISABLE TRIGGER routed_row_checks"); err != nil {
		t.Fatal(err)
	}
	topic := k.Topic(t, 1)
	good := k.NamedTopic(t, topic+".order", 1)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO routed (id, aggregatetype, aggregateid, type, payload, topic) VALUES
  (gen_random_uuid(), 'Order Line', 'a', 'x', '{"n":1}', NULL),
  (gen_random_uuid(), 'order', 'b', 'x', '{"n":2}', 'bad topic!'),
  (gen_random_uuid(), 'order', 'a', 'x', '{"n":3}', NULL),
  (gen_random_uuid(), 'order', 'c', 'x', '{"n":4}', NULL)`); err != nil {
		t.Fatal(err)
	}
	h := ipStartRelay(t, db, k.Brokers, topic, ipConfig{NoNotify: true,
		Relay: relay.Config{PollInterval: 50 * time.Millisecond, TopicTemplate: topic + ".${aggregatetype}"},
		Lease: lease.Config{Table: "routed", Columns: lease.DebeziumColumns}})
	testenv.Eventually(t, 60*time.Second, func() bool { return h.Relay.Stats().DeadLettered == 2 }, "the illegal topics were not dead-lettered (stats %+v)", h.Relay.Stats())
	rows, err := db.Pool.Query(ctx, "SELECT aggregateid, attempts, last_error FROM routed WHERE dead_lettered_at IS NOT NULL ORDER BY aggregateid")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var agg, lastErr string
		var attempts int
		if err := rows.Scan(&agg, &attempts, &lastErr); err != nil {
			t.Fatal(err)
		}
		got = append(got, agg)
		if attempts != 1 || !strings.Contains(lastErr, "illegal") {
			t.Errorf("dead letter of %s: %d attempts, last_error %q; want 1 attempt and a reason saying the topic name is illegal", agg, attempts, lastErr)
		}
	}
	rows.Close()
	if strings.Join(got, ",") != "a,b" {
		t.Fatalf("dead letters %v, want a and b", got)
	}
	// c flows; a's later event is held behind its dead letter (hold).
	recs := ipRawRecords(t, k, good, 1, 10*time.Second)
	if len(recs) != 1 || string(recs[0].Key) != "c" {
		t.Fatalf("records on %s: %v, want only aggregate c's", good, recs)
	}
	if n := ipCount(t, db.Pool, "SELECT count(*) FROM routed WHERE aggregateid = 'a' AND published_at IS NOT NULL"); n != 0 {
		t.Fatalf("%d events of aggregate a published past its dead letter", n)
	}
}

// TestInprocPublishFailureLogsAreBounded: 2,000 events, the broker
// answering every produce request with NOT_LEADER_FOR_PARTITION for 10 s:
// the log stays bounded (before: one WARN per event per retry, 12,220
// lines for 30 s): the relay logs the outage once, naming the condition
// and a sample event, and once when it is over; then everything is
// delivered.
func TestInprocPublishFailureLogsAreBounded(t *testing.T) {
	t.Parallel()
	db := testenv.MigratedDB(t)
	k := testenv.KafkaFake(t)
	topic := k.Topic(t, 3)
	fault := k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.NotLeaderForPartition, Count: -1})
	core, logs := observer.New(zapcore.InfoLevel)
	h := ipStartRelay(t, db, k.Brokers, topic, ipConfig{Logger: zap.New(core),
		Relay: relay.Config{RetryMin: 50 * time.Millisecond, RetryMax: 500 * time.Millisecond, MaxAttempts: 1000}})
	writeEvents(t, db.Pool, 2000, 100)
	began := time.Now()
	testenv.Eventually(t, 20*time.Second, func() bool { return h.Relay.Stats().Failed >= 2000 }, "fewer than 2,000 failed publishes (stats %+v)", h.Relay.Stats())
	time.Sleep(max(0, 10*time.Second-time.Since(began))) // the fault lasts 10 s
	fault.Remove()
	testenv.Eventually(t, 30*time.Second, func() bool { return ipUnpublished(t, db.Pool) == 0 }, "not delivered after the fault")
	// The outage ends once publishes have gone through for 5 s.
	testenv.Eventually(t, 30*time.Second, func() bool { return logs.FilterMessageSnippet("Kafka outage over").Len() > 0 }, "no line said the outage ended")
	warn := logs.FilterLevelExact(zapcore.WarnLevel).Len() + logs.FilterLevelExact(zapcore.ErrorLevel).Len()
	st := h.Relay.Stats()
	t.Logf("%d failed publishes in 10 s: %d log lines in all, %d at warn or error", st.Failed, logs.Len(), warn)
	for _, e := range logs.FilterLevelExact(zapcore.WarnLevel).All() {
		t.Logf("  %s %v", e.Message, e.ContextMap())
	}
	// One summary line per 10 s and kind, the relay's own, kafka-go's
	// rate-limited retries, the episode's end: a few dozen at most.
	if warn > 30 {
		t.Errorf("%d warn/error lines for %d failed publishes: the log is not bounded", warn, st.Failed)
	}
	outage, over := logs.FilterMessageSnippet("Kafka outage: publishes fail").All(), logs.FilterMessageSnippet("Kafka outage over").All()
	if len(outage) != 1 || outage[0].ContextMap()["reason"] != "not_leader" || outage[0].ContextMap()["sample_event_id"] == nil {
		t.Errorf("want one outage line naming the condition and a sample event, got %v", outage)
	}
	if len(over) != 1 {
		t.Errorf("want one line at the outage's end, got %v", over)
	}
	checkTopic(t, db.Pool, k.Brokers, topic, "NOT_LEADER for 10 s, 2,000 events (bounded logs)", 20*time.Second)
}

// A row whose created_at is infinity (plain SQL can write it) between two
// events of another aggregate: before, every claim of it failed after it
// committed ("cannot scan Infinity into *time.Time"), once per lease,
// forever, the events claimed with it were never published, a later event
// of their aggregate overtook them, and the relay still reported itself
// moving. Now the row is dead-lettered by itself, naming created_at, and
// the aggregate's events go out in order.
func TestInprocInfiniteCreatedAtIsParkedAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	topic := k.Topic(t, 1)
	w := writer(t, db.Pool)
	x1 := outbox.Event{ID: outbox.NewID(), AggregateID: "x", Type: "t", Payload: json.RawMessage(`{"n":1}`)}
	ipInsert(t, db.Pool, w, x1)
	var bad string
	if err := db.Pool.QueryRow(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload, created_at)
VALUES (gen_random_uuid(), 'bad', 't', '{}', 'infinity') RETURNING id::text`).Scan(&bad); err != nil {
		t.Fatal(err)
	}
	x2 := outbox.Event{ID: outbox.NewID(), AggregateID: "x", Type: "t", Payload: json.RawMessage(`{"n":2}`)}
	ipInsert(t, db.Pool, w, x2)
	h := ipStartRelay(t, db, k.Brokers, topic, ipConfig{Relay: relay.Config{PollInterval: 50 * time.Millisecond}, Lease: lease.Config{Lease: 2 * time.Second}})
	x3 := outbox.Event{ID: outbox.NewID(), AggregateID: "x", Type: "t", Payload: json.RawMessage(`{"n":3}`)}
	ipInsert(t, db.Pool, w, x3)
	recs := k.Consume(t, topic, 3, 20*time.Second)
	var got []string
	for _, r := range recs {
		got = append(got, r.Headers["event_id"])
	}
	want := []string{x1.ID.String(), x2.ID.String(), x3.ID.String()}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("records %v, want x1, x2, x3 in order %v (stats %+v)", got, want, h.Relay.Stats())
	}
	var lastErr string
	// The relay counts a dead letter after its UPDATE committed: wait for
	// the count too before reading it.
	testenv.Eventually(t, 10*time.Second, func() bool {
		return db.Pool.QueryRow(ctx, "SELECT coalesce(last_error, '') FROM outbox WHERE id::text = $1 AND dead_lettered_at IS NOT NULL", bad).Scan(&lastErr) == nil &&
			h.Relay.Stats().DeadLettered > 0
	}, "the row with created_at infinity is not dead-lettered (stats %+v)", h.Relay.Stats())
	if !strings.Contains(lastErr, "created_at") {
		t.Errorf("last_error %q does not name created_at", lastErr)
	}
	if st := h.Relay.Stats(); st.DeadLettered != 1 {
		t.Errorf("stats %+v: want 1 dead letter", st)
	}
}
