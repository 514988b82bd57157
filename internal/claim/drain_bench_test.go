package claim_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/leasetest"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/lease"
)

// BenchmarkDrainScan drains a backlog of 100,000 events over 100
// aggregates with 1 and 3 claimers taking turns, each keeping two batches
// in flight and marking the oldest in its next claim, as a relay's
// pipeline does; the claims scan from the floor (claim.DisableResume) or
// resume after their last row. It reports the index entries the claims'
// scans read per event drained (pg_stat_user_indexes.idx_tup_read of the
// claim's index), which does not depend on how busy the machine is, and
// the wall time per event. Run it with -benchtime=1x.
func BenchmarkDrainScan(b *testing.B) {
	for _, relays := range []int{1, 3} {
		for _, scan := range []string{"floor", "resume"} {
			b.Run(fmt.Sprintf("relays=%d/scan=%s", relays, scan), func(b *testing.B) {
				for range b.N {
					benchDrainScan(b, relays, scan == "floor")
				}
			})
		}
	}
}

func benchDrainScan(b *testing.B, relays int, fromFloor bool) {
	ctx := context.Background()
	db := testenv.MigratedDB(b)
	var cs []*claim.Claimer
	for i := range relays {
		c, err := claim.New(db.Pool, lease.Config{RelayID: fmt.Sprint("r", i)})
		if err != nil {
			b.Fatal(err)
		}
		if fromFloor {
			claim.DisableResume(c)
		}
		cs = append(cs, c)
	}
	leasetest.Settle(b, db.Pool, "outbox", cs...)
	const events = 100_000
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload)
SELECT gen_random_uuid(), 'agg-' || (g % 100), 't', '{}' FROM generate_series(1, $1) g`, events); err != nil {
		b.Fatal(err)
	}
	before := scanReads(b, db.Pool)
	b.ResetTimer()
	began := time.Now()
	inFlight := make([][]*claim.Batch, relays)
	drained, idle := 0, 0
	for idle < relays {
		idle = 0
		for i, c := range cs {
			var marks []*claim.Mark
			if len(inFlight[i]) == 2 {
				old := inFlight[i][0]
				inFlight[i] = inFlight[i][1:]
				marks = append(marks, &claim.Mark{Token: old.Token, Seqs: seqs(old)})
				c.Settled(old.Token, time.Time{})
			}
			bt, err := c.Claim(ctx, marks...)
			if err != nil {
				b.Fatal(err)
			}
			drained += len(bt.Rows)
			if len(bt.Rows) == 0 {
				idle++
				for _, old := range inFlight[i] {
					if _, err := c.MarkPublished(ctx, old.Token, seqs(old)); err != nil {
						b.Fatal(err)
					}
					c.Settled(old.Token, time.Time{})
				}
				inFlight[i] = nil
				continue
			}
			inFlight[i] = append(inFlight[i], bt)
		}
	}
	took := time.Since(began)
	b.StopTimer()
	if drained != events {
		b.Fatalf("drained %d of %d events", drained, events)
	}
	reads := scanReads(b, db.Pool) - before
	b.ReportMetric(float64(reads)/events, "entries/event")
	b.ReportMetric(float64(took.Microseconds())/events, "µs/event")
	for _, c := range cs {
		_ = c.Close(ctx)
	}
}

// scanReads returns the index entries read from the claim's index so far,
// after every connection of pool flushed its statistics.
func scanReads(b *testing.B, pool *pgxpool.Pool) int64 {
	b.Helper()
	ctx := context.Background()
	for _, conn := range pool.AcquireAllIdle(ctx) {
		_, err := conn.Exec(ctx, "SELECT pg_stat_force_next_flush()")
		conn.Release()
		if err != nil {
			b.Fatal(err)
		}
	}
	var n int64
	if err := pool.QueryRow(ctx, `SELECT pg_stat_force_next_flush(), coalesce(sum(idx_tup_read), 0)::bigint FROM pg_stat_user_indexes
WHERE schemaname = current_schema() AND indexrelname = 'outbox_unpublished_seq_idx'`).Scan(nil, &n); err != nil {
		b.Fatal(err)
	}
	return n
}
