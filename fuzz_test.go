package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testenv"
)

// fuzzInsert is the writer's own INSERT (writer.go), run without its
// validation: what PostgreSQL makes of the same parameters.
const fuzzInsert = `INSERT INTO outbox (id, aggregate_id, event_type, payload, headers, topic)
SELECT * FROM unnest($1::text[]::uuid[], $2::text[], $3::text[], $4::text[]::jsonb[], $5::text[]::jsonb[], $6::text[])`

// FuzzValidateAgreesWithPostgres compares the writer's verdict
// (Writer.Validate) on one event with what PostgreSQL does with it: the
// same parameters inserted as the writer inserts them, in a savepoint of a
// transaction that must stay usable. An event Validate accepts must insert
// (else Add would abort the caller's transaction); an event it refuses must
// fail to insert, except where the writer is stricter on purpose: invalid
// UTF-8 in a header, which json.Marshal would silently replace with U+FFFD.
// The seeds run in every `go test`; `go test -fuzz FuzzValidateAgreesWithPostgres`
// explores further (with DATABASE_URL set, or a throwaway cluster per
// worker).
func FuzzValidateAgreesWithPostgres(f *testing.F) {
	for _, s := range []struct{ payload, agg, typ, hk, hv, topic string }{
		{`{"n":1}`, "a", "t", "", "", ""},
		{`{"n":"a\u0000b"}`, "a", "t", "", "", ""},
		{`{"n":"\\u0000"}`, "a", "t", "", "", ""},
		{`{"n":"\ud800"}`, "a", "t", "", "", ""},
		{`"\ud83d\ude00"`, "a", "t", "", "", ""},
		{`"\udc00\ud800"`, "a", "t", "", "", ""},
		{`["\ud800\u0041"]`, "a", "t", "", "", ""},
		{"\"\xff\"", "a", "t", "", "", ""},
		{`1e131072`, "a", "t", "", "", ""},
		{`-1e131071`, "a", "t", "", "", ""},
		{`1e-16384`, "a", "t", "", "", ""},
		{`0e-16383`, "a", "t", "", "", ""},
		{`0e1073741823`, "a", "t", "", "", ""},
		{`1e99999999999999999999`, "a", "t", "", "", ""},
		{`{}`, "a\x00b", "t", "", "", ""},
		{`{}`, "\xff", "t", "", "", ""},
		{`{}`, "a", "t\x00", "", "", ""},
		{`{}`, "a", "", "", "", ""},
		{`{}`, "", "t", "", "", ""},
		{`{}`, "a", "t", "k", "v\x00", ""},
		{`{}`, "a", "t", "k\x00", "v", ""},
		{`{}`, "a", "t", "", "v", ""},
		{`{}`, "a", "t", "event_id", "v", ""},
		{`{}`, "a", "t", "k", "\u2028<&>", ""},
		{`{}`, "a", "t", "", "", "a\x00"},
		{`{}`, "a", "t", "", "", "ok.topic_1-2"},
		{`{}`, "a", "t", "", "", ".."},
		{` [ 1 , {"a" : [ ] } ] `, "é€😀", "t", "", "", ""},
		{`{"a":1`, "a", "t", "", "", ""},
		{``, "a", "t", "", "", ""},
	} {
		f.Add([]byte(s.payload), s.agg, s.typ, s.hk, s.hv, s.topic)
	}
	ctx := context.Background()
	db := testenv.MigratedDB(f)
	w, err := outbox.NewWriter(outbox.WriterConfig{Wakeup: outbox.WakeupNone})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, payload []byte, agg, typ, hk, hv, topic string) {
		ev := outbox.Event{ID: outbox.NewID(), AggregateID: agg, Type: typ, Payload: payload, Topic: topic}
		if hk != "" || hv != "" {
			ev.Headers = map[string]string{hk: hv}
		}
		verdict := w.Validate(ev)
		if verdict != nil && !errors.Is(verdict, outbox.ErrInvalidEvent) {
			t.Fatalf("Validate = %v, not a *ValidationError", verdict)
		}
		var headers, top *string
		if ev.Headers != nil {
			b, err := json.Marshal(ev.Headers)
			if err != nil {
				t.Fatal(err)
			}
			s := string(b)
			headers = &s
		}
		if topic != "" {
			top = &topic
		}
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		sp, err := tx.Begin(ctx) // SAVEPOINT
		if err != nil {
			t.Fatal(err)
		}
		_, insertErr := sp.Exec(ctx, fuzzInsert, []string{ev.ID.String()}, []string{agg}, []string{typ}, []string{string(payload)}, []*string{headers}, []*string{top})
		if err := sp.Rollback(ctx); err != nil { // ROLLBACK TO SAVEPOINT
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
			t.Fatalf("the transaction is not usable after the savepoint: %v", err)
		}
		stricter := !utf8.ValidString(hk) || !utf8.ValidString(hv)
		switch {
		case verdict == nil && insertErr != nil:
			t.Fatalf("Validate accepted an event PostgreSQL refuses (Add would abort the caller's transaction): %v\nevent %+q", insertErr, ev)
		case verdict != nil && insertErr == nil && !stricter:
			t.Fatalf("Validate refused an event PostgreSQL accepts: %v\nevent %+q", verdict, ev)
		}
	})
}
