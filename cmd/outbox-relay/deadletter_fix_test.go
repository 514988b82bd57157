package main

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testenv"
)

// docsExampleID is the event ID docs/operating.md's examples use.
const docsExampleID = "0192f3a4-5b6c-7d8e-9f00-112233445566"

// fixStatement returns the UPDATE of docs/operating.md's "Fixing a dead
// letter's payload", for event id and the JSON payload.
func fixStatement(t *testing.T, id, payload string) string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/operating.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)### Fixing a dead letter's payload\n.*?```sql\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal(`docs/operating.md has no "Fixing a dead letter's payload" with an sql block`)
	}
	stmt := string(m[1])
	lit := regexp.MustCompile(`payload = ('[^']*')`).FindStringSubmatch(stmt)
	if lit == nil || !strings.Contains(stmt, "'"+docsExampleID+"'") {
		t.Fatalf("the documented statement sets no payload literal or names no example ID:\n%s", stmt)
	}
	stmt = strings.Replace(stmt, lit[1], "'"+payload+"'", 1)
	return strings.Replace(stmt, "'"+docsExampleID+"'", "'"+id+"'", 1)
}

// A dead letter whose payload is too large for the relay is corrected
// the way docs/operating.md says (its UPDATE, then requeue): the relay
// publishes the corrected payload under the same event ID, before the
// later event of its aggregate that waited behind it. Once the event is
// published, the same UPDATE changes nothing.
func TestFixingADeadLetterPayload(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, k := testenv.MigratedDB(t), testenv.Kafka(t)
	topic := k.Topic(t, 1)
	big, next := outbox.NewID().String(), outbox.NewID().String()
	// Plain SQL, past the writer's record limit; the later event of the
	// same aggregate is held back behind the dead letter.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload) VALUES
  ($1, 'pay_1', 'payment.imported', jsonb_build_object('blob', repeat('x', 2000000))),
  ($2, 'pay_1', 'payment.captured', '{"amount":"1.00"}')`, big, next); err != nil {
		t.Fatal(err)
	}
	// --max-batch-bytes below the payload: the claim does not read it and
	// dead-letters it by its payload_size, which the fix must reset.
	r := startRun(t, "--database-url", db.ConnString, "--brokers", strings.Join(k.Brokers, ","), "--topic", topic, "--metrics-addr", "",
		"--max-batch-bytes", "1048576")
	testenv.Eventually(t, 30*time.Second, func() bool {
		var dead bool
		return db.Pool.QueryRow(ctx, "SELECT dead_lettered_at IS NOT NULL FROM outbox WHERE id = $1", big).Scan(&dead) == nil && dead
	}, "event %s not dead-lettered:\n%s", big, r.stderr)
	// An event of another aggregate, published after the dead letter,
	// shows the relay claimed again past the held-back one: only then is
	// "not published" a verdict.
	marker := outbox.NewID().String()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload) VALUES ($1, 'other', 'marker', '{}')`, marker); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() bool {
		var done bool
		return db.Pool.QueryRow(ctx, "SELECT published_at IS NOT NULL FROM outbox WHERE id = $1", marker).Scan(&done) == nil && done
	}, "the marker event %s was not published:\n%s", marker, r.stderr)
	var published int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE published_at IS NOT NULL AND aggregate_id = 'pay_1'").Scan(&published); err != nil || published != 0 {
		t.Fatalf("%d events of pay_1 published before the fix (%v); want the later one held back", published, err)
	}

	fixed := `{"blob":"trimmed"}`
	tag, err := db.Pool.Exec(ctx, fixStatement(t, big, fixed))
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("the documented UPDATE of a dead letter: %v, %v; want UPDATE 1", tag, err)
	}
	code, out, stderr := runMain(t, ctx, "requeue", "--database-url", db.ConnString, "--event-id", big)
	if code != 0 || !strings.Contains(out, "requeued 1") {
		t.Fatalf("requeue: exit %d, stdout %q, stderr %q", code, out, stderr)
	}

	all := k.Consume(t, topic, 3, 60*time.Second)
	var recs []testenv.Record
	for _, rec := range all {
		if rec.Headers["event_id"] != marker {
			recs = append(recs, rec)
		}
	}
	if len(all) != 3 || len(recs) != 2 || recs[0].Headers["event_id"] != big || recs[1].Headers["event_id"] != next {
		t.Fatalf("consumed %d records %v; want the marker, %s (corrected) then %s\n%s", len(all), all, big, next, r.stderr)
	}
	var got struct{ Blob string }
	if err := json.Unmarshal(recs[0].Value, &got); err != nil || got.Blob != "trimmed" {
		t.Errorf("corrected record's value %s (%v), want %s", recs[0].Value, err, fixed)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		var n int
		return db.Pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE published_at IS NOT NULL").Scan(&n) == nil && n == 3
	}, "the three events not marked published")
	if tag, err := db.Pool.Exec(ctx, fixStatement(t, big, `{"late":true}`)); err != nil || tag.RowsAffected() != 0 {
		t.Fatalf("the documented UPDATE of a published event: %v, %v; want UPDATE 0", tag, err)
	}
}
