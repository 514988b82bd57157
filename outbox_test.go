package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestAddValidatesBeforeWriting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	w, err := outbox.NewWriter(outbox.WriterConfig{MaxRecordBytes: 90})
	if err != nil {
		t.Fatal(err)
	}
	good := outbox.Event{AggregateID: "a", Type: "t", Payload: json.RawMessage(`{}`)}
	cases := []struct {
		name  string
		ev    outbox.Event
		field string
	}{
		{"empty aggregate", outbox.Event{Type: "t", Payload: json.RawMessage(`{}`)}, "AggregateID"},
		{"empty type", outbox.Event{AggregateID: "a", Payload: json.RawMessage(`{}`)}, "Type"},
		{"empty payload", outbox.Event{AggregateID: "a", Type: "t"}, "Payload"},
		{"invalid json", outbox.Event{AggregateID: "a", Type: "t", Payload: json.RawMessage(`{"a":`)}, "Payload"},
		{"too large", outbox.Event{AggregateID: "a", Type: "t", Payload: json.RawMessage(`"0123456789abcdef0123456789"`)}, "Payload"},
		// 22 bytes as written, 30 as PostgreSQL prints it back: over 90 with key and headers.
		{"too large as stored", outbox.Event{AggregateID: "a", Type: "t", Payload: json.RawMessage(`[1,2,3,4,5,6,7,8,9,0,1]`)}, "Payload"},
		{"bad topic", outbox.Event{AggregateID: "a", Type: "t", Payload: json.RawMessage(`1`), Topic: "no spaces"}, "Topic"},
		{"empty header name", outbox.Event{AggregateID: "a", Type: "t", Payload: json.RawMessage(`1`), Headers: map[string]string{"": "x"}}, "Headers"},
		{"reserved header", outbox.Event{AggregateID: "a", Type: "t", Payload: json.RawMessage(`1`), Headers: map[string]string{"event_id": "x"}}, "Headers"},
	}
	for _, tc := range cases {
		// The bad event comes second: the good first one must not be written.
		err := w.Add(ctx, db.Pool, good, tc.ev)
		var ve *outbox.ValidationError
		if !errors.As(err, &ve) || ve.Field != tc.field || ve.Index != 1 || !errors.Is(err, outbox.ErrInvalidEvent) || !outbox.IsValidationError(err) {
			t.Errorf("%s: err = %v, want a ValidationError on %s at index 1", tc.name, err, tc.field)
		}
	}
	var n int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM outbox").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d rows written by refused calls, want 0", n)
	}
}

func TestAddWritesInOrderInOneTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	explicit := outbox.NewID()
	evs := []outbox.Event{
		{ID: explicit, AggregateID: "order-1", Type: "order.created", Payload: json.RawMessage(`{"name":"Zoë ☕","items":[{"sku":"a","qty":2}]}`), Headers: map[string]string{"tenant": "t1"}, Topic: "orders"},
		{AggregateID: "order-1", Type: "order.paid", Payload: json.RawMessage(`null`)},
		{AggregateID: "order-2", Type: "order.created", Payload: json.RawMessage(`12345678901234567890123`)},
	}
	if err := outbox.Add(ctx, tx, evs...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := db.Pool.Query(ctx, "SELECT id, aggregate_id, event_type, payload::text, headers::text, topic, published_at IS NULL, attempts FROM outbox ORDER BY seq")
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		id                uuid.UUID
		agg, typ, payload string
		headers, topic    *string
		unpublished       bool
		attempts          int
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.id, &x.agg, &x.typ, &x.payload, &x.headers, &x.topic, &x.unpublished, &x.attempts)
		return x, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("got %d rows, want 3", len(got))
	}
	if got[0].id != explicit || got[0].agg != "order-1" || got[0].typ != "order.created" || got[1].typ != "order.paid" || got[2].agg != "order-2" {
		t.Fatalf("rows out of order or wrong: %+v", got)
	}
	var p0, want0 any
	_ = json.Unmarshal([]byte(got[0].payload), &p0)
	_ = json.Unmarshal(evs[0].Payload, &want0)
	if !jsonEqual(p0, want0) {
		t.Fatalf("payload = %s, want %s", got[0].payload, evs[0].Payload)
	}
	if got[0].headers == nil || !strings.Contains(*got[0].headers, `"tenant": "t1"`) || got[0].topic == nil || *got[0].topic != "orders" {
		t.Fatalf("headers/topic = %v/%v", got[0].headers, got[0].topic)
	}
	if got[1].id == uuid.Nil || got[1].id.Version() != 7 || got[1].headers != nil || got[1].topic != nil {
		t.Fatalf("second row: %+v (want a generated UUIDv7, no headers, no topic)", got[1])
	}
	for _, r := range got {
		if !r.unpublished || r.attempts != 0 {
			t.Fatalf("new row %+v should be unpublished with 0 attempts", r)
		}
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func TestWakeupIsDeliveredOnlyOnCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	listen, err := pgx.Connect(ctx, db.ConnString)
	if err != nil {
		t.Fatal(err)
	}
	defer listen.Close(ctx)
	// The test's own channel: channels are per database, and the other
	// tests of this package notify on "outbox" in the same database.
	ch := db.Schema
	if _, err := listen.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	w, err := outbox.NewWriter(outbox.WriterConfig{Wakeup: outbox.WakeupEveryTx, Channel: ch})
	if err != nil {
		t.Fatal(err)
	}
	ev := outbox.Event{AggregateID: "a", Type: "t", Payload: json.RawMessage(`{}`)}

	// Rolled back: no row and no notification. A sentinel notification sent
	// after the rollback must be the first one to arrive.
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Add(ctx, tx, ev); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, "SELECT pg_notify($1, 'sentinel')", ch); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := listen.WaitForNotification(wctx)
	if err != nil {
		t.Fatal(err)
	}
	if n.Payload != "sentinel" {
		t.Fatalf("first notification %q, want the sentinel: the rolled-back transaction notified", n.Payload)
	}
	var count int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM outbox").Scan(&count); err != nil || count != 0 {
		t.Fatalf("rows after rollback: %d (err %v), want 0", count, err)
	}

	// Committed: the notification arrives, and not before the commit.
	tx, err = db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Add(ctx, tx, ev); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, "SELECT pg_notify($1, 'before-commit')", ch); err != nil {
		t.Fatal(err)
	}
	if n, err = listen.WaitForNotification(wctx); err != nil || n.Payload != "before-commit" {
		t.Fatalf("notification before commit = %v, %v; want only the marker", n, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("kp:%d", outbox.KeyPartition(ev.AggregateID, 256))
	if n, err = listen.WaitForNotification(wctx); err != nil || n.Payload != want || n.Channel != ch {
		t.Fatalf("notification after commit = %+v, %v; want payload %q (the event's key partition) on channel %s", n, err, want, ch)
	}
}

// With WakeupEveryTx the payload names the key partitions of the
// transaction's events, each once, so that of several relays only their
// owners wake; past config.MaxKeyPartitionsNamed (64) partitions it is
// empty, which wakes every relay.
func TestEveryTxWakeupNamesTheKeyPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	listen, err := pgx.Connect(ctx, db.ConnString)
	if err != nil {
		t.Fatal(err)
	}
	defer listen.Close(ctx)
	ch := db.Schema
	if _, err := listen.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	w, err := outbox.NewWriter(outbox.WriterConfig{Wakeup: outbox.WakeupEveryTx, Channel: ch})
	if err != nil {
		t.Fatal(err)
	}
	events := func(aggs ...string) []outbox.Event {
		var evs []outbox.Event
		for _, a := range aggs {
			evs = append(evs, outbox.Event{AggregateID: a, Type: "t", Payload: json.RawMessage(`{}`)})
		}
		return evs
	}
	few := []string{"a", "b", "a", "c", "b"}
	var many []string
	for i := range 300 {
		many = append(many, fmt.Sprint("agg-", i))
	}
	for _, aggs := range [][]string{few, many} {
		if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { return w.Add(ctx, tx, events(aggs...)...) }); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		n, err := listen.WaitForNotification(wctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		want := ""
		if len(aggs) == len(few) {
			seen := map[int]bool{}
			for _, a := range aggs {
				seen[outbox.KeyPartition(a, 256)] = true
			}
			var ps []string
			for p := range seen {
				ps = append(ps, fmt.Sprint(p))
			}
			got := strings.Split(strings.TrimPrefix(n.Payload, "kp:"), ",")
			slices.Sort(ps)
			slices.Sort(got)
			if !strings.HasPrefix(n.Payload, "kp:") || !slices.Equal(got, ps) {
				t.Fatalf("payload %q for aggregates %v, want kp: and the partitions %v", n.Payload, aggs, ps)
			}
			continue
		}
		if n.Payload != want {
			t.Fatalf("payload %q for %d aggregates, want an empty one", n.Payload, len(aggs))
		}
	}
}

func TestDebouncedWakeupNotifiesAtMostOncePerInterval(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	listen, err := pgx.Connect(ctx, db.ConnString)
	if err != nil {
		t.Fatal(err)
	}
	defer listen.Close(ctx)
	ch := db.Schema // the test's own channel (see TestWakeupIsDeliveredOnlyOnCommit)
	if _, err := listen.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	// A window far longer than the test: only the first Add notifies.
	w, err := outbox.NewWriter(outbox.WriterConfig{Wakeup: outbox.WakeupDebounced, WakeupInterval: time.Hour, Channel: ch})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if err := w.Add(ctx, db.Pool, outbox.Event{AggregateID: "a", Type: "t", Payload: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Pool.Exec(ctx, "SELECT pg_notify($1, 'sentinel')", ch); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var got []string
	for {
		n, err := listen.WaitForNotification(wctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, n.Payload)
		if n.Payload == "sentinel" {
			break
		}
	}
	if len(got) != 2 {
		t.Fatalf("notifications %q, want exactly one wake-up then the sentinel", got)
	}
}

func TestNewWriterRejectsBadConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  outbox.WriterConfig
		want string
	}{
		{outbox.WriterConfig{MaxRecordBytes: -1}, "MaxRecordBytes"},
		{outbox.WriterConfig{WakeupInterval: -time.Second}, "WakeupInterval"},
		{outbox.WriterConfig{Wakeup: 9}, "Wakeup"},
		{outbox.WriterConfig{Table: "a.b.c"}, "Table"},
	} {
		if _, err := outbox.NewWriter(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewWriter(%+v) = %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
}

func TestAddCarriesTheCallersTraceContext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	traceID, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	spanID, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: spanID, TraceFlags: trace.FlagsSampled})
	tctx := trace.ContextWithSpanContext(ctx, sc)
	own := map[string]string{"traceparent": "00-11111111111111111111111111111111-2222222222222222-01"}
	if err := outbox.Add(tctx, db.Pool,
		outbox.Event{AggregateID: "a", Type: "t", Payload: json.RawMessage(`1`)},
		outbox.Event{AggregateID: "b", Type: "t", Payload: json.RawMessage(`2`), Headers: own},
	); err != nil {
		t.Fatal(err)
	}
	if err := outbox.Add(ctx, db.Pool, outbox.Event{AggregateID: "c", Type: "t", Payload: json.RawMessage(`3`)}); err != nil {
		t.Fatal(err)
	}
	got := map[string]*string{}
	rows, err := db.Pool.Query(ctx, "SELECT aggregate_id, headers->>'traceparent' FROM outbox")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var agg string
		var tp *string
		if err := rows.Scan(&agg, &tp); err != nil {
			t.Fatal(err)
		}
		got[agg] = tp
	}
	if tp := got["a"]; tp == nil || *tp != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Fatalf("traceparent of an event written under a span = %v", tp)
	}
	if tp := got["b"]; tp == nil || *tp != own["traceparent"] {
		t.Fatalf("an event's own traceparent was replaced: %v", tp)
	}
	if got["c"] != nil {
		t.Fatalf("traceparent without a span: %v", *got["c"])
	}
}

// On a database the migrations have not reached, Add says which table is
// missing and the command that creates it, and wraps the server's error.
func TestAddNamesTheMigrationWhenTheTableIsMissing(t *testing.T) {
	t.Parallel()
	db := testenv.MigratedDB(t)
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: "no_such_outbox"})
	if err != nil {
		t.Fatal(err)
	}
	err = w.Add(context.Background(), db.Pool, outbox.Event{AggregateID: "a", Type: "t", Payload: json.RawMessage(`{}`)})
	if err == nil || !strings.Contains(err.Error(), "no_such_outbox not found") || !strings.Contains(err.Error(), "outbox-relay migrate") || !strings.Contains(err.Error(), "42P01") {
		t.Fatalf("Add on a missing table = %v, want the table, the migrate command and the server's error", err)
	}
}
