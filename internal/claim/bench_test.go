package claim_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/lease"
)

// benchRows is how many events one refill of BenchmarkClaimAndMark's table adds.
const benchRows = 100_000

// benchFill inserts benchRows events over 1,000 aggregates, created at
// createdAt (an SQL expression of g, the row's number).
func benchFill(b *testing.B, pool *pgxpool.Pool, createdAt string) {
	b.Helper()
	if _, err := pool.Exec(context.Background(), `INSERT INTO outbox (id, aggregate_id, event_type, payload, created_at)
SELECT gen_random_uuid(), 'agg-' || (g % 1000), 't', '{"n": 1}', `+createdAt+` FROM generate_series(1, $1) g`, benchRows); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(context.Background(), `VACUUM ANALYZE outbox`); err != nil {
		b.Fatal(err)
	}
}

// benchClaimMark is one op of BenchmarkClaimAndMark: a claim of the default batch
// (500 rows) and the mark of every row it leased, the relay's hot path.
func benchClaimMark(b *testing.B, pool *pgxpool.Pool, createdAt string) {
	ctx := context.Background()
	c, err := claim.New(pool, lease.Config{RelayID: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	benchFill(b, pool, createdAt)
	rows := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		batch, err := c.Claim(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if len(batch.Rows) == 0 {
			b.StopTimer()
			benchFill(b, pool, createdAt)
			b.StartTimer()
			i--
			continue
		}
		s := make([]int64, len(batch.Rows))
		for j, r := range batch.Rows {
			s[j] = r.Seq
		}
		if n, err := c.MarkPublished(ctx, batch.Token, s); err != nil || n != int64(len(s)) {
			b.Fatalf("mark: %d of %d rows, %v", n, len(s), err)
		}
		rows += len(s)
	}
	b.ReportMetric(float64(rows)/float64(b.N), "rows/op")
}

// BenchmarkClaimAndMark measures a claim of 500 rows plus their mark, preloaded
// with 100,000 events over 1,000 aggregates: on the plain outbox table,
// and on a time-partitioned one (migrate --time-partitioned, daily
// partitions, 6 days kept, 2 ahead, and the DEFAULT partition) twice:
// with the events' created_at following their seq over the last 28
// hours (what writers produce: a batch's rows are in one or two
// partitions), and with every batch spread over 7 daily partitions
// (created_at = now() - (g % 7) days, the worst case). Run it with
// -benchtime=200x (one refill covers 200 ops).
func BenchmarkClaimAndMark(b *testing.B) {
	b.Run("plain", func(b *testing.B) {
		db := testenv.MigratedDB(b)
		benchClaimMark(b, db.Pool, "now()")
	})
	b.Run("time-partitioned", func(b *testing.B) {
		db := timePartitionedDB(b, 6)
		benchClaimMark(b, db.Pool, "now() - ($1 - g) * interval '1 second'")
	})
	b.Run("time-partitioned-spread", func(b *testing.B) {
		db := timePartitionedDB(b, 6)
		benchClaimMark(b, db.Pool, "now() - (g % 7) * interval '1 day'")
	})
}
