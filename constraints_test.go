package outbox_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testenv"
)

// constraintOf is the table's rule (migration 00008) that refuses what
// a ValidationError's Field refuses.
var constraintOf = map[string]string{
	"AggregateID": "outbox_aggregate_id_check",
	"Type":        "outbox_event_type_check",
	"Headers":     "outbox_headers_check",
	"Topic":       "outbox_topic_check",
}

// The Go writer's validation and the table's row checks must accept
// and refuse the same rows: each case is one row, written once through
// outbox.Writer.Add and once as a plain INSERT, each in its own transaction
// (rolled back), and both must give the same verdict, the case's want (""
// accepted, else the constraint that refuses it; the writer's
// ValidationError names the matching field). A row the Go API cannot
// express (headers that are not an object of strings, an empty topic
// string: the writer stores an empty Topic as SQL NULL) counts as refused
// by the writer, so the database must refuse it too.
func TestWriterValidationAgreesWithTableConstraints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	w, err := outbox.NewWriter(outbox.WriterConfig{Wakeup: outbox.WakeupNone})
	if err != nil {
		t.Fatal(err)
	}
	p := func(s string) *string { return &s }
	const (
		aggCheck     = "outbox_aggregate_id_check"
		typeCheck    = "outbox_event_type_check"
		headersCheck = "outbox_headers_check"
		topicCheck   = "outbox_topic_check"
	)
	euro, emoji := "€", "😀" // 3 and 4 bytes of UTF-8
	type row struct {
		name    string
		agg     string
		typ     string
		headers *string // JSON text; nil: SQL NULL
		topic   *string // nil: SQL NULL
		want    string
	}
	cases := []row{
		{name: "plain", agg: "a", typ: "t"},
		{name: "empty aggregate_id", agg: "", typ: "t", want: aggCheck},
		{name: "1024-byte aggregate_id", agg: strings.Repeat("x", 1024), typ: "t"},
		{name: "1025-byte aggregate_id", agg: strings.Repeat("x", 1025), typ: "t", want: aggCheck},
		{name: "1024 bytes in 256 four-byte characters", agg: strings.Repeat(emoji, 256), typ: "t"},
		{name: "1024 bytes in 342 characters", agg: strings.Repeat(euro, 341) + "a", typ: "t"},
		{name: "1025 bytes in 342 characters", agg: strings.Repeat(euro, 341) + "é", typ: "t", want: aggCheck},
		{name: "1026 bytes in 342 characters", agg: strings.Repeat(euro, 342), typ: "t", want: aggCheck},
		{name: "3000-byte aggregate_id", agg: strings.Repeat("x", 3000), typ: "t", want: aggCheck},
		{name: "empty event_type", agg: "a", typ: "", want: typeCheck},
		{name: "headers of strings", agg: "a", typ: "t", headers: p(`{"a": "b", "tenant": "acme", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}`)},
		{name: "headers empty object", agg: "a", typ: "t", headers: p(`{}`)},
		{name: "headers empty value", agg: "a", typ: "t", headers: p(`{"a": ""}`)},
		{name: "headers number value", agg: "a", typ: "t", headers: p(`{"a": 1}`), want: headersCheck},
		{name: "headers null value", agg: "a", typ: "t", headers: p(`{"a": null}`), want: headersCheck},
		{name: "headers boolean value", agg: "a", typ: "t", headers: p(`{"a": true}`), want: headersCheck},
		{name: "headers array value", agg: "a", typ: "t", headers: p(`{"a": ["x"]}`), want: headersCheck},
		{name: "headers object value", agg: "a", typ: "t", headers: p(`{"a": {"b": "c"}}`), want: headersCheck},
		{name: "headers one bad value of two", agg: "a", typ: "t", headers: p(`{"a": "b", "c": 2}`), want: headersCheck},
		{name: "headers empty name", agg: "a", typ: "t", headers: p(`{"": "x"}`), want: headersCheck},
		{name: "headers event_id", agg: "a", typ: "t", headers: p(`{"event_id": "x"}`), want: headersCheck},
		{name: "headers event_type", agg: "a", typ: "t", headers: p(`{"event_type": "x"}`), want: headersCheck},
		{name: "headers aggregate_id", agg: "a", typ: "t", headers: p(`{"aggregate_id": "x"}`), want: headersCheck},
		{name: "headers empty array", agg: "a", typ: "t", headers: p(`[]`), want: headersCheck},
		{name: "headers array of strings", agg: "a", typ: "t", headers: p(`["x"]`), want: headersCheck},
		{name: "headers string", agg: "a", typ: "t", headers: p(`"x"`), want: headersCheck},
		{name: "headers number", agg: "a", typ: "t", headers: p(`1`), want: headersCheck},
		{name: "headers JSON null", agg: "a", typ: "t", headers: p(`null`), want: headersCheck},
		{name: "legal topic", agg: "a", typ: "t", topic: p("orders.v1_EU-west")},
		{name: "249-character topic", agg: "a", typ: "t", topic: p(strings.Repeat("t", 249))},
		{name: "topic of dots", agg: "a", typ: "t", topic: p("...")},
		{name: "250-character topic", agg: "a", typ: "t", topic: p(strings.Repeat("t", 250)), want: topicCheck},
		{name: "empty topic", agg: "a", typ: "t", topic: p(""), want: topicCheck},
		{name: "topic .", agg: "a", typ: "t", topic: p("."), want: topicCheck},
		{name: "topic ..", agg: "a", typ: "t", topic: p(".."), want: topicCheck},
		{name: "topic with a space", agg: "a", typ: "t", topic: p("a b"), want: topicCheck},
		{name: "topic with a slash", agg: "a", typ: "t", topic: p("a/b"), want: topicCheck},
		{name: "topic with a newline", agg: "a", typ: "t", topic: p("ab\n"), want: topicCheck},
		{name: "topic with é", agg: "a", typ: "t", topic: p("café"), want: topicCheck},
		{name: "topic with the Kelvin sign", agg: "a", typ: "t", topic: p("\u212a"), want: topicCheck},
	}

	// goEvent is the row as an outbox.Event; false if the Go API cannot
	// express it.
	goEvent := func(r row) (outbox.Event, bool) {
		e := outbox.Event{AggregateID: r.agg, Type: r.typ, Payload: json.RawMessage(`{}`)}
		if r.topic != nil {
			if *r.topic == "" {
				return e, false
			}
			e.Topic = *r.topic
		}
		if r.headers != nil {
			var members map[string]json.RawMessage
			if err := json.Unmarshal([]byte(*r.headers), &members); err != nil || members == nil {
				return e, false // not an object
			}
			e.Headers = map[string]string{}
			for k, v := range members {
				if !bytes.HasPrefix(v, []byte(`"`)) {
					return e, false // not a string
				}
				var s string
				if err := json.Unmarshal(v, &s); err != nil {
					t.Fatal(err)
				}
				e.Headers[k] = s
			}
		}
		return e, true
	}
	// verdict is "" if err is nil, else the constraint (or, for a
	// ValidationError, the field's constraint) that refused the row.
	verdict := func(err error) (string, error) {
		var ve *outbox.ValidationError
		var pe *pgconn.PgError
		switch {
		case err == nil:
			return "", nil
		case errors.As(err, &ve):
			return constraintOf[ve.Field], nil
		case errors.As(err, &pe) && pe.Code == "23514":
			return pe.ConstraintName, nil
		}
		return "", err
	}
	inTx := func(f func(tx pgx.Tx) error) error {
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		return f(tx)
	}

	for _, r := range cases {
		goVerdict := "(not expressible)"
		if e, ok := goEvent(r); ok {
			err := inTx(func(tx pgx.Tx) error { return w.Add(ctx, tx, e) })
			var ve *outbox.ValidationError
			if err != nil && !errors.As(err, &ve) {
				// The writer accepted the event and the table refused it.
				t.Errorf("%s: writer's validation passed, its INSERT failed: %v", r.name, err)
				continue
			}
			if goVerdict, err = verdict(err); err != nil {
				t.Fatal(err)
			}
			if ve != nil && r.want == aggCheck && !strings.Contains(ve.Reason, "MaxAggregateIDBytes") && r.agg != "" {
				t.Errorf("%s: reason %q does not name the limit", r.name, ve.Reason)
			}
		}
		dbErr := inTx(func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload, headers, topic) VALUES (gen_random_uuid(), $1, $2, '{}', $3::jsonb, $4)`,
				r.agg, r.typ, r.headers, r.topic)
			return err
		})
		dbVerdict, err := verdict(dbErr)
		if err != nil {
			t.Errorf("%s: plain INSERT: unexpected error %v", r.name, err)
			continue
		}
		goRefused := goVerdict != ""
		if goRefused != (dbVerdict != "") {
			t.Errorf("%s: writer and table disagree: writer %q, table %q", r.name, goVerdict, dbVerdict)
		}
		if dbVerdict != r.want || (goVerdict != "(not expressible)" && goVerdict != r.want) {
			t.Errorf("%s: writer %q, table %q, want %q", r.name, goVerdict, dbVerdict, r.want)
		}
		t.Logf("%-42s writer %-28q table %q", r.name, goVerdict, dbVerdict)
	}
}

// The reason for MaxAggregateIDBytes: without the check constraint, an
// incompressible aggregate ID of 3,000 bytes breaks the B-tree index
// outbox_unpublished_aggregate_idx (SQLSTATE 54000) and aborts the
// transaction, while 1024 bytes, the limit, fit with room to spare. The
// writer refuses 3,000 bytes before it writes, leaving the caller's
// transaction usable.
func TestMaxAggregateIDBytesIsUnderTheIndexLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	if _, err := db.Pool.Exec(ctx, `ALTER TABLE outbox DISABLE TRIGGER outbox_row_checks`); err != nil {
		t.Fatal(err)
	}
	random := func(n int) string { // base64 of random bytes: pglz cannot compress it
		b := make([]byte, n)
		_, _ = rand.Read(b)
		return base64.RawStdEncoding.EncodeToString(b)[:n]
	}
	insert := `INSERT INTO outbox (id, aggregate_id, event_type, payload) VALUES (gen_random_uuid(), $1, 't', '{}')`
	if _, err := db.Pool.Exec(ctx, insert, random(outbox.MaxAggregateIDBytes)); err != nil {
		t.Fatalf("%d bytes: %v", outbox.MaxAggregateIDBytes, err)
	}
	_, err := db.Pool.Exec(ctx, insert, random(3000))
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "54000" || pe.ConstraintName != "outbox_unpublished_aggregate_idx" {
		t.Fatalf("3000 bytes without the check: err = %v, want 54000 on outbox_unpublished_aggregate_idx", err)
	}
	t.Logf("3000 bytes without the check: %s", pe.Message)

	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	err = outbox.Add(ctx, tx, outbox.Event{AggregateID: random(3000), Type: "t", Payload: json.RawMessage(`{}`)})
	var ve *outbox.ValidationError
	if !errors.As(err, &ve) || ve.Field != "AggregateID" || !errors.Is(err, outbox.ErrInvalidEvent) ||
		!strings.Contains(ve.Reason, fmt.Sprint(outbox.MaxAggregateIDBytes)) {
		t.Fatalf("Add with 3000 bytes: err = %v, want a ValidationError on AggregateID naming the limit", err)
	}
	t.Logf("Add: %v", err)
	if err := outbox.Add(ctx, tx, outbox.Event{AggregateID: "a", Type: "t", Payload: json.RawMessage(`{}`)}); err != nil {
		t.Fatalf("the transaction is not usable after the refusal: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}
