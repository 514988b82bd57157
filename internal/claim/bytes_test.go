package claim_test

import (
	"context"
	"errors"
	"testing"

	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/lease"
)

// claimAggs claims once and returns the aggregate IDs of the rows, in
// seq order, and Batch.More.
func claimAggs(t *testing.T, c *claim.Claimer) ([]string, bool) {
	t.Helper()
	b, err := c.Claim(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range b.Rows {
		out = append(out, r.AggregateID)
	}
	return out, b.More
}

// A claim takes rows in seq order while the payload bytes before each
// (payload_size, recorded by the insert trigger) stay under
// MaxBatchBytes: always the first row, however large; More says rows
// were left for the next claim. A row without a recorded size (written
// before migration 00010) counts as the whole bound.
func TestClaimStopsAtMaxBatchBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	// Ten payloads of about 100 KB (stored compressed, a few KB each),
	// then five small ones; aggregates b0..b9, s0..s4.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload)
SELECT gen_random_uuid(), 'b' || g, 't', jsonb_build_object('n', g, 'pad', repeat('x', 100000)) FROM generate_series(0, 9) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload)
SELECT gen_random_uuid(), 's' || g, 't', jsonb_build_object('n', g) FROM generate_series(0, 4) g`); err != nil {
		t.Fatal(err)
	}
	c := newClaimer(t, db.Pool, lease.Config{RelayID: "bytes", MaxBatchBytes: 350000})
	for i, want := range []struct {
		aggs string
		more bool
	}{
		{"[b0 b1 b2 b3]", true},           // 0, 100k, 200k, 300k before each
		{"[b4 b5 b6 b7]", true},           // the same
		{"[b8 b9 s0 s1 s2 s3 s4]", false}, // 200k and a few bytes before the last
		{"[]", false},
	} {
		got, more := claimAggs(t, c)
		if s := fmtAggs(got); s != want.aggs || more != want.more {
			t.Fatalf("claim %d: %s, more %v; want %s, more %v", i+1, s, more, want.aggs, want.more)
		}
	}

	// A row larger than the bound is claimed, after what came before it,
	// without its payload: never read, it comes with ErrPayloadTooLarge.
	db2 := testenv.MigratedDB(t)
	if _, err := db2.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload)
SELECT gen_random_uuid(), 'big' || g, 't', jsonb_build_object('pad', repeat('x', 100000 * (1 + g % 2))) FROM generate_series(0, 2) g`); err != nil {
		t.Fatal(err)
	}
	small := newClaimer(t, db2.Pool, lease.Config{RelayID: "small", MaxBatchBytes: 150000})
	b, err := small.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Rows) != 2 || !b.More || b.Rows[0].DecodeErr != nil || len(b.Rows[0].Payload) < 100000 ||
		!errors.Is(b.Rows[1].DecodeErr, claim.ErrPayloadTooLarge) || b.Rows[1].Payload != nil || b.Rows[1].AggregateID != "big1" {
		t.Fatalf("claim over 100 KB and 200 KB payloads with a 150,000-byte bound: %d rows, more %v, %+v; want big0 with its payload, big1 without (ErrPayloadTooLarge)",
			len(b.Rows), b.More, b.Rows)
	}
	t.Logf("the row over the bound: %v", b.Rows[1].DecodeErr)
	if got, more := claimAggs(t, small); fmtAggs(got) != "[big2]" || more {
		t.Fatalf("second claim: %s, more %v; want [big2]", fmtAggs(got), more)
	}

	// Rows without a size: each counts as the whole bound.
	db3 := testenv.MigratedDB(t)
	if _, err := db3.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload)
SELECT gen_random_uuid(), 'r' || g, 't', '{}' FROM generate_series(0, 3) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := db3.Pool.Exec(ctx, `UPDATE outbox SET payload_size = NULL WHERE aggregate_id IN ('r0', 'r2')`); err != nil {
		t.Fatal(err)
	}
	legacy := newClaimer(t, db3.Pool, lease.Config{RelayID: "legacy"})
	for i, want := range []string{"[r0]", "[r1 r2]", "[r3]"} {
		if got, _ := claimAggs(t, legacy); fmtAggs(got) != want {
			t.Fatalf("claim %d over rows without a payload size: %s, want %s", i+1, fmtAggs(got), want)
		}
	}
}

func fmtAggs(aggs []string) string {
	s := "["
	for i, a := range aggs {
		if i > 0 {
			s += " "
		}
		s += a
	}
	return s + "]"
}

// JSON that prints back far larger than jsonb stores it (a tester's case:
// seven numbers 1e131000, payload_size 170, 917,056 bytes printed; a
// claim of 500 held 458 MB): the claim keeps payloads while those before
// come to less than MaxBatchBytes and a quarter, and the rest come without
// (Unread),
// so the memory a batch holds stays bounded. The first row is always
// read.
func TestClaimStopsReadingPayloadsAtMaxBatchBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload)
SELECT gen_random_uuid(), 'm' || g, 't', jsonb_build_object('n', g, 'pad', '[1e131000]'::jsonb) FROM generate_series(0, 9) g`); err != nil {
		t.Fatal(err)
	}
	var stored, printed int
	if err := db.Pool.QueryRow(ctx, `SELECT max(payload_size), max(octet_length(payload::text)) FROM outbox`).Scan(&stored, &printed); err != nil {
		t.Fatal(err)
	}
	if stored > 1000 || printed < 131000 {
		t.Fatalf("payload_size %d, printed %d bytes: the payloads do not print larger than stored", stored, printed)
	}
	c := newClaimer(t, db.Pool, lease.Config{RelayID: "printed", MaxBatchBytes: 300000})
	b, err := c.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var read, unread, bytes int
	for _, r := range b.Rows {
		switch {
		case r.Unread && r.Payload == nil:
			unread++
		case !r.Unread && len(r.Payload) >= 131000:
			read++
			bytes += len(r.Payload)
		default:
			t.Fatalf("row %s: Unread %v with %d payload bytes", r.AggregateID, r.Unread, len(r.Payload))
		}
	}
	// Read while the bytes before each are under the bound and a
	// quarter (375,000): 0, 131k, 262k.
	if len(b.Rows) != 10 || read != 3 || unread != 7 {
		t.Fatalf("claim of 10 payloads of %d bytes printed (%d stored) under a 300,000-byte bound: %d rows, %d read (%d bytes), %d unread; want 10, 3, 7",
			printed, stored, len(b.Rows), read, bytes, unread)
	}
}
