package faults

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/faultkit"
	"github.com/pgoutbox/outbox/internal/testenv"
)

// relayMemoryBound is the peak RSS the relay process must stay under
// whatever the payload sizes, with its defaults (lease.DefaultMaxBatchBytes):
// what a container with a 256 MiB memory limit gives it.
const relayMemoryBound = 256 << 20

// TestProcLargePayloadsDrainWithinTheMemoryBound: with the relay stopped,
// 2,000 events of about 900 KB each (issue 20: each claim of 500 such rows
// held 450 MB, the pipeline three claims; the relay grew to 1.8 GB and a
// 600 MiB container limit killed it within 4 s, at every restart), and
// two of 40 MB among them, each of its own aggregate. A relay process with
// its defaults publishes the 2,000 and dead-letters the two (over its
// claim's byte bound, they are never read, and over Kafka's record limit
// anyway), and its peak RSS (VmHWM) stays under relayMemoryBound.
func TestProcLargePayloadsDrainWithinTheMemoryBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	topic := k.Topic(t, 4)
	const events = 2000
	// In 20 transactions: the table stores each payload compressed (about
	// 10 KB), the relay reads it whole.
	for lo := 1; lo <= events; lo += 100 {
		if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload)
SELECT gen_random_uuid(), 'agg-' || (i % 50), 't', jsonb_build_object('n', i, 'pad', repeat('x', 900000))
FROM generate_series($1::int, $1::int + 99) i`, lo); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload)
SELECT gen_random_uuid(), 'huge-' || i, 't', jsonb_build_object('pad', repeat('x', 40000000)) FROM generate_series(1, 2) i`); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	r := startRelayProc(t, db.ConnString, k.Brokers, topic)
	if left := waitNoRows(t, r, db, "published_at IS NULL AND dead_lettered_at IS NULL"); left > 0 {
		t.Fatalf("%d of %d events neither published nor dead-lettered after 4 minutes", left, events+2)
	}
	var published, dead int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE published_at IS NOT NULL),
  count(*) FILTER (WHERE dead_lettered_at IS NOT NULL AND aggregate_id LIKE 'huge-%' AND last_error LIKE '%byte bound%')
FROM outbox`).Scan(&published, &dead); err != nil {
		t.Fatal(err)
	}
	if published != events || dead != 2 {
		t.Errorf("%d events published, %d of the 40 MB ones dead-lettered over the byte bound; want %d and 2", published, dead, events)
	}
	drained := time.Since(began)
	peak, err := r.PeakRSS()
	if err != nil {
		t.Fatal(err)
	}
	var records int64
	for _, off := range k.EndOffsets(t, topic) {
		records += off
	}
	t.Logf("%d events of 900 KB published and 2 of 40 MB dead-lettered in %s (%d records on the topic); relay peak RSS %.1f MiB",
		events, drained.Round(100*time.Millisecond), records, float64(peak)/(1<<20))
	if records < events {
		t.Errorf("%d records on the topic, want at least %d", records, events)
	}
	if peak >= relayMemoryBound {
		t.Errorf("relay peak RSS %.1f MiB, want under %d MiB", float64(peak)/(1<<20), relayMemoryBound>>20)
	}
	r.Term()
	if err := r.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
}

// TestProcPayloadsPrintedLargerThanStoredStayWithinTheMemoryBound: JSON
// whose text is far larger than jsonb stores it (a tester's case: seven
// numbers 1e131000, payload_size 170, 917,056 bytes as PostgreSQL prints
// it back, which Add accepts). A claim bounded by payload_size alone took
// 500 of them, 458 MB, and the relay grew to 1.36 GB. A relay process
// with its defaults publishes them all, each aggregate's in order, and
// its peak RSS stays under relayMemoryBound.
func TestProcPayloadsPrintedLargerThanStoredStayWithinTheMemoryBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	topic := k.Topic(t, 4)
	const events, aggregates = 400, 20
	for lo := 0; lo < events; lo += 100 {
		if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload)
SELECT gen_random_uuid(), 'agg-' || (i % $2), 't', jsonb_build_object('n', i, 'pad', '[1e131000,1e131000,1e131000,1e131000,1e131000,1e131000,1e131000]'::jsonb)
FROM generate_series($1::int, $1::int + 99) i`, lo, aggregates); err != nil {
			t.Fatal(err)
		}
	}
	var stored, printed int
	if err := db.Pool.QueryRow(ctx, `SELECT max(payload_size), max(octet_length(payload::text)) FROM outbox`).Scan(&stored, &printed); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	r := startRelayProc(t, db.ConnString, k.Brokers, topic)
	if left := waitNoRows(t, r, db, "published_at IS NULL"); left > 0 {
		t.Fatalf("%d of %d events unpublished after 4 minutes", left, events)
	}
	drained := time.Since(began)
	peak, err := r.PeakRSS()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d events of %d bytes printed (%d stored) published in %s; relay peak RSS %.1f MiB",
		events, printed, stored, drained.Round(100*time.Millisecond), float64(peak)/(1<<20))
	if peak >= relayMemoryBound {
		t.Errorf("relay peak RSS %.1f MiB, want under %d MiB", float64(peak)/(1<<20), relayMemoryBound>>20)
	}
	r.Term()
	if err := r.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	// Each aggregate's events in the order written: n rises per key at
	// each event's first delivery (a repeat is at-least-once).
	last, seen, repeats := map[string]int{}, map[int]bool{}, 0
	for _, rec := range k.Consume(t, topic, events, time.Minute) {
		var p struct{ N int }
		if err := json.Unmarshal(rec.Value, &p); err != nil {
			t.Fatal(err)
		}
		if seen[p.N] {
			repeats++
			continue
		}
		seen[p.N] = true
		if n, ok := last[string(rec.Key)]; ok && p.N <= n {
			t.Fatalf("key %s: n=%d first delivered after n=%d", rec.Key, p.N, n)
		}
		last[string(rec.Key)] = p.N
	}
	if len(seen) != events {
		t.Fatalf("%d distinct events on the topic, want %d", len(seen), events)
	}
	t.Logf("in order per key; %d repeats", repeats)
}

// waitNoRows waits up to 4 minutes, failing the test if relay r exits,
// until no row of the outbox table matches where, and returns how many
// still do.
func waitNoRows(t *testing.T, r *RelayProc, db *testenv.TestDB, where string) int {
	t.Helper()
	var left int
	faultkit.Wait(4*time.Minute, func() bool {
		if r.Exited() {
			t.Fatalf("%s exited: %v\n%s", r.Name, r.Err(), tail(r.Stderr(), 5000))
		}
		if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE `+where).Scan(&left); err != nil {
			t.Fatal(err)
		}
		return left == 0
	})
	return left
}
