package claim_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/lease"
)

// BenchmarkClaim measures one claim of a full batch of small events (500
// rows of about 100 bytes of payload, 50 aggregates), as a relay draining
// a backlog runs it: the claim's round trip, from Claim's call to its
// sorted rows. Each iteration inserts its rows first and marks them
// published after, outside the timer. The claim's own cost is what the
// byte bound (Config.MaxBatchBytes) must not make dearer for small
// payloads: compare runs with -count.
func BenchmarkClaim(b *testing.B) {
	ctx := context.Background()
	db := testenv.MigratedDB(b)
	c, err := claim.New(db.Pool, lease.Config{RelayID: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	const rows = lease.DefaultBatchSize
	insert := `INSERT INTO outbox (id, aggregate_id, event_type, payload)
SELECT gen_random_uuid(), 'agg-' || (g % 50), 't', jsonb_build_object('n', g, 'pad', repeat('x', 80)) FROM generate_series(1, $1) g`
	var claimed time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		if _, err := db.Pool.Exec(ctx, insert, rows); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		began := time.Now()
		batch, err := c.Claim(ctx)
		claimed += time.Since(began)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		if len(batch.Rows) != rows {
			b.Fatalf("claimed %d rows, want %d", len(batch.Rows), rows)
		}
		if _, err := c.MarkPublished(ctx, batch.Token, seqs(batch)); err != nil {
			b.Fatal(err)
		}
		c.Settled(batch.Token, time.Time{})
		b.StartTimer()
	}
	b.ReportMetric(float64(claimed.Microseconds())/float64(b.N)/rows, "µs/row")
}
