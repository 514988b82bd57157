package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testenv"
)

// TestAddRefusesWhatPostgresWouldRefuse: an event PostgreSQL would refuse
// (a NUL byte or invalid UTF-8 in a text column, a \u0000 escape or a lone
// surrogate in the jsonb payload, a number outside numeric's range) is
// refused by Add with a *ValidationError naming the field, before anything
// is sent: the caller's transaction stays usable, its next statement
// succeeds and its business change commits. Before, the INSERT failed
// (22P05, 22P02, 22021, 22003) and aborted the transaction (25P02).
func TestAddRefusesWhatPostgresWouldRefuse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	w, err := outbox.NewWriter(outbox.WriterConfig{Wakeup: outbox.WakeupNone})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, "CREATE TABLE business (n int)"); err != nil {
		t.Fatal(err)
	}
	ev := func(mod func(*outbox.Event)) outbox.Event {
		e := outbox.Event{AggregateID: "a", Type: "t", Payload: json.RawMessage(`{}`)}
		mod(&e)
		return e
	}
	payload := func(p string) outbox.Event {
		return ev(func(e *outbox.Event) { e.Payload = json.RawMessage(p) })
	}
	cases := []struct {
		name  string
		ev    outbox.Event
		field string
	}{
		{"payload \\u0000", payload(`{"n":"a\u0000b"}`), "Payload"},
		{"payload key \\u0000", payload(`{"a\u0000":1}`), "Payload"},
		{"payload lone high surrogate", payload(`{"n":"\ud800"}`), "Payload"},
		{"payload high surrogate at the end", payload(`"\ud83d"`), "Payload"},
		{"payload high surrogate before a letter", payload(`"\ud800\u0041"`), "Payload"},
		{"payload lone low surrogate", payload(`["\udc00"]`), "Payload"},
		{"payload invalid UTF-8", payload("{\"n\":\"\xff\"}"), "Payload"},
		{"payload number too large", payload(`1e131072`), "Payload"},
		{"payload number too small a scale", payload(`1e-16384`), "Payload"},
		{"aggregate NUL", ev(func(e *outbox.Event) { e.AggregateID = "a\x00b" }), "AggregateID"},
		{"aggregate invalid UTF-8", ev(func(e *outbox.Event) { e.AggregateID = "\xff" }), "AggregateID"},
		{"type NUL", ev(func(e *outbox.Event) { e.Type = "t\x00" }), "Type"},
		{"type truncated UTF-8", ev(func(e *outbox.Event) { e.Type = "caf\xc3" }), "Type"},
		{"header value NUL", ev(func(e *outbox.Event) { e.Headers = map[string]string{"k": "v\x00"} }), "Headers"},
		{"header name NUL", ev(func(e *outbox.Event) { e.Headers = map[string]string{"k\x00": "v"} }), "Headers"},
		{"header value invalid UTF-8", ev(func(e *outbox.Event) { e.Headers = map[string]string{"k": "\xff"} }), "Headers"},
		{"topic NUL", ev(func(e *outbox.Event) { e.Topic = "a\x00" }), "Topic"},
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for i, tc := range cases {
		if _, err := tx.Exec(ctx, "INSERT INTO business VALUES ($1)", i); err != nil {
			t.Fatalf("%s: the business change before Add: %v", tc.name, err)
		}
		err := w.Add(ctx, tx, tc.ev)
		var ve *outbox.ValidationError
		if !errors.As(err, &ve) || ve.Field != tc.field || !errors.Is(err, outbox.ErrInvalidEvent) {
			t.Errorf("%s: Add = %v, want a *ValidationError on %s", tc.name, err, tc.field)
		} else {
			t.Logf("%s: %v", tc.name, err)
		}
		var one int
		if err := tx.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
			t.Fatalf("%s: the transaction is not usable after Add: %v", tc.name, err)
		}
	}
	// What PostgreSQL accepts is still accepted, in the same transaction.
	for _, p := range []string{`"\\u0000"`, `"\ud83d\ude00"`, `"\u00e9\uffff"`, `1e131071`, `1e-16383`, `0.0000e131075`} {
		if err := w.Add(ctx, tx, payload(p)); err != nil {
			t.Errorf("payload %s: %v", p, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var business, events int
	if err := db.Pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM business), (SELECT count(*) FROM outbox)").Scan(&business, &events); err != nil {
		t.Fatal(err)
	}
	if business != len(cases) || events != 6 {
		t.Fatalf("committed %d business rows and %d events, want %d and 6", business, events, len(cases))
	}
}
