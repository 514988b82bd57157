package faults

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/outbox/internal/listen"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/relay"
)

// ipRawRecords reads topic from the start with a plain franz-go client until
// it has n records or timeout passed, keeping every header in order.
func ipRawRecords(t *testing.T, k *testenv.TestKafka, topic string, n int, timeout time.Duration) []*kgo.Record {
	t.Helper()
	cl := k.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

// ipHeaderValues returns every value of header key, in order.
func ipHeaderValues(r *kgo.Record, key string) []string {
	var out []string
	for _, h := range r.Headers {
		if h.Key == key {
			out = append(out, string(h.Value))
		}
	}
	return out
}

// TestInprocAnyValidJSONBFromPlainSQL: a plain-SQL writer can store any
// valid jsonb (and SQL NULL) as payload. The relay publishes every payload
// byte for byte as PostgreSQL renders it (payload::text; jsonb normalizes
// spacing, key order, duplicate keys and escapes at insert), SQL NULL as a
// null value (a tombstone). Headers other than an object of strings are
// refused by outbox_headers_check now; rows written before it (emulated by
// dropping it) are published as documented: numbers as their exact JSON
// text, booleans as true/false, JSON null as no header, objects and arrays
// as compact JSON; a document that is not an object is dead-lettered by
// itself, with the reason.
func TestInprocAnyValidJSONBFromPlainSQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	topic := k.Topic(t, 2)
	ipStartRelay(t, db, k.Brokers, topic, ipConfig{Relay: relay.Config{PollInterval: time.Minute}})

	nested := func(open, close string, depth int) string {
		return strings.Repeat(open, depth) + "1" + strings.Repeat(close, depth)
	}
	type row struct {
		name    string
		payload *string // SQL text of the jsonb; nil: SQL NULL
		headers *string
		// wantHeaders are extra headers expected besides event_id,
		// event_type and aggregate_id.
		wantHeaders map[string]string
		// dead: the row cannot be published; it is dead-lettered.
		dead bool
	}
	p := func(s string) *string { return &s }
	rows := []row{
		{name: "json null", payload: p(`null`)},
		{name: "sql null", payload: nil},
		{name: "1e400", payload: p(`1e400`)},
		{name: "huge integer", payload: p(`123456789012345678901234567890`)},
		{name: "tiny negative", payload: p(`-0.000000000000000000000000000001e-50`)},
		{name: "huge in object", payload: p(`{"big": 1e400, "neg": -123456789012345678901234567890.5, "f": 1.50}`)},
		{name: "deep arrays", payload: p(nested("[", "]", 500))},
		{name: "deep objects", payload: p(strings.Repeat(`{"a":`, 200) + "1" + strings.Repeat("}", 200))},
		{name: "unicode escapes", payload: p(`{"s": "caf\u00e9 \ud83d\ude80 \u2028 \"q\" \\ \/ \t", "k\u00fc": "\u65e5\u672c"}`)},
		{name: "raw unicode", payload: p(`["Grüße", "日本語", "🚀", "\u0001"]`)},
		{name: "empty object", payload: p(`{}`)},
		{name: "empty array", payload: p(`[]`)},
		{name: "string", payload: p(`"just a JSON string"`)},
		{name: "bool", payload: p(`true`)},
		{name: "duplicate keys and spacing", payload: p(` { "b" : [ 1 , 2 ] , "a" : 1 , "a" : 2 } `)},
		{name: "headers mixed types", payload: p(`{}`), headers: p(`{"n": 1, "b": true, "nul": null, "o": {"x": [1]}, "s": "str", "": "empty name"}`),
			wantHeaders: map[string]string{"n": "1", "b": "true", "o": `{"x":[1]}`, "s": "str", "": "empty name"}},
		{name: "headers numbers exactly", payload: p(`{}`), headers: p(`{"tenant_id": 9007199254740993, "seq": 12345678901234567890, "amount": 100.10, "none": null}`),
			wantHeaders: map[string]string{"tenant_id": "9007199254740993", "seq": "12345678901234567890", "amount": "100.10"}},
		{name: "headers array", payload: p(`{}`), headers: p(`[1, "two"]`), dead: true},
		{name: "headers string", payload: p(`{}`), headers: p(`"str"`), dead: true},
		{name: "headers json null", payload: p(`{}`), headers: p(`null`), wantHeaders: map[string]string{}},
		{name: "headers empty object", payload: p(`{}`), headers: p(`{}`), wantHeaders: map[string]string{}},
	}
	// Rows written without the row checks (before migration 00007, or
	// with triggers off: session_replication_role = replica).
	if _, err := db.Pool.Exec(ctx, "ALTER TABLE outbox DISABLE TRIGGER outbox_row_checks"); err != nil {
		t.Fatal(err)
	}
	ids := make([]uuid.UUID, len(rows))
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rows {
		ids[i] = uuid.New() // v4: plain-SQL writers need not use v7
		agg := fmt.Sprintf("agg-%d", i%3)
		if r.dead {
			agg = fmt.Sprintf("dead-%d", i) // a dead letter holds its aggregate's later events
		}
		if _, err := tx.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload, headers) VALUES ($1, $2, 'bad.input', $3::jsonb, $4::jsonb)`,
			ids[i], agg, r.payload, r.headers); err != nil {
			t.Fatalf("%s: insert: %v", r.name, err)
		}
	}
	if _, err := tx.Exec(ctx, "SELECT pg_notify($1, '')", db.Schema); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	dead := 0
	for _, r := range rows {
		if r.dead {
			dead++
		}
	}
	// Every row is settled (published or dead-lettered) before any is
	// read: the dead letters may be written after the last record is on
	// the topic, and a published row's record is on the topic before its
	// mark.
	testenv.Eventually(t, 60*time.Second, func() bool {
		return ipCount(t, db.Pool, "SELECT count(*) FROM outbox WHERE published_at IS NULL AND dead_lettered_at IS NULL") == 0
	}, "not every row published or dead-lettered")
	recs := ipRawRecords(t, k, topic, len(rows)-dead, 60*time.Second)
	byID := map[string]*kgo.Record{}
	for _, r := range recs {
		for _, v := range ipHeaderValues(r, "event_id") {
			byID[v] = r
		}
	}
	for i, r := range rows {
		rec := byID[ids[i].String()]
		if r.dead {
			var lastErr string
			if err := db.Pool.QueryRow(ctx, "SELECT coalesce(last_error, '') FROM outbox WHERE id = $1 AND dead_lettered_at IS NOT NULL", ids[i]).Scan(&lastErr); err != nil || rec != nil {
				t.Errorf("%s: not dead-lettered (%v) or published (%v)", r.name, err, rec != nil)
			} else if !strings.Contains(lastErr, "headers") {
				t.Errorf("%s: last_error %q does not name the headers", r.name, lastErr)
			}
			continue
		}
		if rec == nil {
			t.Errorf("%s: event %s not on Kafka", r.name, ids[i])
			continue
		}
		var want *string
		if err := db.Pool.QueryRow(ctx, "SELECT payload::text FROM outbox WHERE id = $1", ids[i]).Scan(&want); err != nil {
			t.Fatal(err)
		}
		switch {
		case want == nil && rec.Value != nil:
			t.Errorf("%s: SQL NULL payload published as %q, want a null value", r.name, rec.Value)
		case want != nil && !bytes.Equal(rec.Value, []byte(*want)):
			t.Errorf("%s: value %.200q, want payload::text %.200q", r.name, rec.Value, *want)
		}
		if r.wantHeaders == nil {
			continue
		}
		got := map[string]string{}
		for _, h := range rec.Headers {
			switch h.Key {
			case "event_id", "event_type", "aggregate_id":
				continue
			}
			got[h.Key] = string(h.Value)
		}
		if fmt.Sprint(got) != fmt.Sprint(r.wantHeaders) {
			t.Errorf("%s: extra headers %v, want %v", r.name, got, r.wantHeaders)
		}
	}
	// The checker compares the topic with the table: the dead letters are
	// checked above.
	if _, err := db.Pool.Exec(ctx, "DELETE FROM outbox WHERE dead_lettered_at IS NOT NULL"); err != nil {
		t.Fatal(err)
	}
	checkTopic(t, db.Pool, k.Brokers, topic, "bad input: any valid jsonb / SQL NULL / odd headers", 10*time.Second)
}

// TestInprocUnexpectedNotifyPayloadJustWakes: notifications on the relay's
// channel with payloads no writer of ours sends — garbage, JSON, empty, an
// almost-ping, the 8000-byte maximum, unicode — each wake the relay (its
// poll interval is a minute) and do nothing else: the listener stays
// connected.
func TestInprocUnexpectedNotifyPayloadJustWakes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	topic := k.Topic(t, 1)
	h := ipStartRelay(t, db, k.Brokers, topic, ipConfig{Relay: relay.Config{PollInterval: time.Minute}})
	consumer := k.Consumer(t, topic)
	testenv.Eventually(t, 10*time.Second, func() bool { return h.Relay.Stats().Claims >= 1 }, "no start-up claim")
	reconnects := h.Listener.Reconnects()
	payloads := []string{
		"garbage {not json",
		"",
		`{"unexpected": true, "id": 42}`,
		"pgoutbox-ping:notanumber",
		"pgoutbox-ping:",
		"pgoutbox-ping:-1",
		"Grüße 🚀",
		strings.Repeat("x", 7999), // NOTIFY payloads must be shorter than 8000 bytes
	}
	for i, payload := range payloads {
		id := uuid.New()
		// A plain insert without pg_notify: only our odd notification can
		// wake the relay.
		if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload) VALUES ($1, 'agg', 'odd.notify', $2::jsonb)`, id, fmt.Sprintf(`{"n":%d}`, i)); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Pool.Exec(ctx, "SELECT pg_notify($1, $2)", db.Schema, payload); err != nil {
			t.Fatalf("notify %.40q: %v", payload, err)
		}
		// A hang guard under the poll interval: the poll timer restarts at
		// every claim, so only the notification can wake the relay within
		// 30 s (WakePoll, checked below, tells).
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		r, err := consumer.Next(rctx)
		cancel()
		if err != nil || r.Headers["event_id"] != id.String() {
			t.Fatalf("notification %.40q did not wake the relay (poll interval 1m): %v %v; stats %+v", payload, err, r.Headers, h.Relay.Stats())
		}
	}
	if st := h.Relay.Stats(); st.WakePoll != 0 {
		t.Fatalf("stats %+v: a poll was needed", st)
	}
	if h.Listener.State() != listen.StateListening || h.Listener.Reconnects() != reconnects {
		t.Fatalf("listener %s with %d reconnects (was %d): an odd payload broke it", h.Listener.State(), h.Listener.Reconnects(), reconnects)
	}
	checkTopic(t, db.Pool, k.Brokers, topic, "NOTIFY with unexpected payloads", 10*time.Second)
}

// TestInprocRowHeadersCannotShadowReservedHeaders: a writer's headers
// (jsonb from plain SQL, or outbox.Event.Headers) named event_id,
// event_type or aggregate_id must not change what a consumer reads as
// those headers. Consumers dedupe on event_id, and Kafka clients commonly
// read the last header of a key (Java's Headers.lastHeader): a second
// event_id header after the relay's own makes a consumer skip a real event
// as a "duplicate" of the spoofed ID, or process a redelivery twice.
func TestInprocRowHeadersCannotShadowReservedHeaders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	topic := k.Topic(t, 1)
	ipStartRelay(t, db, k.Brokers, topic, ipConfig{})
	id, other := uuid.New(), uuid.New()
	spoof := fmt.Sprintf(`{"event_id": %q, "event_type": "spoofed.type", "aggregate_id": "spoofed-agg", "tenant": "acme"}`, other)
	// The table refuses such headers now (outbox_headers_check)...
	var pgErr *pgconn.PgError
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload, headers) VALUES ($1, 'agg', 'real.type', '{}', $2::jsonb)`,
		uuid.New(), spoof); !errors.As(err, &pgErr) || pgErr.ConstraintName != "outbox_headers_check" {
		t.Fatalf("insert with reserved header names: %v; want outbox_headers_check to refuse it", err)
	}
	// ...but a row written without the checks (before migration 00007)
	// may have them.
	if _, err := db.Pool.Exec(ctx, "ALTER TABLE outbox DISABLE TRIGGER outbox_row_checks"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload, headers) VALUES ($1, 'agg', 'real.type', '{}', $2::jsonb)`,
		id, spoof); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, "SELECT pg_notify($1, '')", db.Schema); err != nil {
		t.Fatal(err)
	}
	recs := ipRawRecords(t, k, topic, 1, 60*time.Second)
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1", len(recs))
	}
	r := recs[0]
	want := map[string]string{"event_id": id.String(), "event_type": "real.type", "aggregate_id": "agg", "tenant": "acme"}
	var bugs []string
	for _, key := range []string{"event_id", "event_type", "aggregate_id", "tenant"} {
		if vals := ipHeaderValues(r, key); len(vals) != 1 || vals[0] != want[key] {
			bugs = append(bugs, fmt.Sprintf("header %s is %q, want only %q", key, vals, want[key]))
		}
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return ipUnpublished(t, db.Pool) == 0 }, "not marked")
	if len(bugs) > 0 {
		// The checker would see the spoofed event_id (it reads the last
		// one): a phantom, and the real event lost.
		ipBug(t, "%s: relay.message appends the row's headers after the reserved ones without dropping reserved names "+
			"(most consumers read the last value)", strings.Join(bugs, "; "))
	}
	checkTopic(t, db.Pool, k.Brokers, topic, "row headers named like the reserved headers", 10*time.Second)
}
