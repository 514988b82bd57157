package claim

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgoutbox/outbox/lease"
)

// On a time-partitioned table a mark searches only the partitions of its
// claim's created_at range: a batch of 500 rows from one day's partition
// of seven (plus the partitions ahead and DEFAULT) probes that one
// partition's index, not every partition's (each probe of 500 seqs costs
// about a thousand buffers even where it finds nothing).
func TestMarkSearchesOnlyTheClaimsPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := TimePartitionedDB(t, 6)
	// 1,000 rows a day for 7 days, the oldest day first: seq follows
	// created_at, as writers make it.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload, created_at)
SELECT gen_random_uuid(), 'agg-' || (g % 50), 't', '{}', now() - (6 - g / 1000) * interval '1 day' FROM generate_series(0, 6999) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, "VACUUM ANALYZE outbox"); err != nil {
		t.Fatal(err)
	}
	c, err := New(db.Pool, lease.Config{RelayID: "bound", BatchSize: 500})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Claim(ctx)
	if err != nil || len(b.Rows) != 500 {
		t.Fatalf("claim: %v (%d rows)", err, len(b.Rows))
	}
	if c.rows != c.st.partitionedRows {
		t.Fatal("the claimer did not find the table partitioned")
	}
	seqs := make([]int64, len(b.Rows))
	for i, r := range b.Rows {
		seqs[i] = r.Seq
	}
	bounded := c.created.args(b.Token, seqs)
	if bounded.CreatedFrom.InfinityModifier != pgtype.Finite || bounded.CreatedTo.InfinityModifier != pgtype.Finite {
		t.Fatalf("no created_at range recorded for the claim: %+v", bounded)
	}
	unbounded := (&createdRanges{}).args(b.Token, seqs)
	withRange := explainBuffers(t, c, c.rows.mark.SQL, c.rows.mark.Args(bounded)...)
	without := explainBuffers(t, c, c.rows.mark.SQL, c.rows.mark.Args(unbounded)...)
	t.Logf("a mark of 500 rows touched %d buffers with the claim's created_at range, %d without", withRange, without)
	if withRange*2 > without {
		t.Errorf("the mark touched %d buffers with the range, %d without: the partitions outside it were searched", withRange, without)
	}
	// And it marks them all.
	n, err := c.MarkPublished(ctx, b.Token, seqs)
	if err != nil || n != int64(len(seqs)) {
		t.Fatalf("mark: %d of %d rows, %v", n, len(seqs), err)
	}
}
