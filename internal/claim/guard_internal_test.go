package claim

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/lease"
)

// planTx begins a transaction on c's pool, with the Claimer's plan
// settings (sql/plan_settings.SQL) when withSettings; the caller rolls it back.
func planTx(t *testing.T, c *Claimer, withSettings bool) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := c.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if withSettings {
		if _, err := tx.Exec(ctx, c.st.plan.SQL); err != nil {
			_ = tx.Rollback(ctx)
			t.Fatal(err)
		}
	}
	return tx
}

// explainBuffers runs sql with args under EXPLAIN (ANALYZE, BUFFERS), with
// the Claimer's plan settings, in a transaction it rolls back, and returns
// the shared buffers the statement touched.
func explainBuffers(t *testing.T, c *Claimer, sql string, args ...any) int64 {
	t.Helper()
	ctx := context.Background()
	tx := planTx(t, c, true)
	defer func() { _ = tx.Rollback(ctx) }()
	var plan []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+sql, args...).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	var out []struct {
		Plan struct {
			Hit  int64 `json:"Shared Hit Blocks"`
			Read int64 `json:"Shared Read Blocks"`
		} `json:"Plan"`
	}
	if err := json.Unmarshal(plan, &out); err != nil || len(out) != 1 {
		t.Fatalf("plan %s: %v", plan, err)
	}
	return out[0].Plan.Hit + out[0].Plan.Read
}

// While a transaction holds a snapshot, VACUUM removes none of the
// published rows' index entries, and the order guard's probe of
// outbox_unpublished_aggregate_idx walks its aggregate's entries from its
// lower bound. That bound was the scan's start, seq 0 for a new relay and
// for the once-a-minute rescan: with two relays and a snapshot held for 6
// minutes at 1,000 events/s (make soak), such claims took seconds, passed
// the statement timeout, and the relays stalled. The bound is now the
// lowest unpublished seq at or above the floor, computed once per claim.
// Measured here as the buffers one claim of 500 rows touches over 60,000
// published rows of 20 aggregates.
func TestGuardProbesStartAtTheLowestUnpublishedRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	hold, err := pgx.Connect(ctx, db.ConnString)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close(ctx)
	if _, err := hold.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1"); err != nil {
		t.Fatal(err)
	}
	// 60,000 rows of 20 aggregates, claimed and marked published as a
	// relay does (their old row versions and index entries stay: the
	// snapshot is held). That relay leaves: the new relay below owns
	// every partition.
	publishRounds(t, db.Pool, 60)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload)
SELECT gen_random_uuid(), 'agg-' || (g % 20), 't', '{}' FROM generate_series(1, 500) g`); err != nil {
		t.Fatal(err)
	}
	c, err := New(db.Pool, lease.Config{RelayID: "new", BatchSize: 500})
	if err != nil {
		t.Fatal(err)
	}
	// A claim scanning from seq 0 with the floor 0, as a new relay's, that
	// owns every partition, with the guard on (a row backing off, say).
	if err := c.rebalance(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	claim := c.rows.claim
	fresh := explainBuffers(t, c, claim.SQL, claim.Args(claimArgs{BatchSize: c.cfg.BatchSize, LeaseMS: c.cfg.Lease.Milliseconds(), Holder: c.holder.Load(),
		Token: uuid.New(), ScanFrom: 0, Floor: 0, Member: c.own.member, Owned: c.own.claimMask, OwnsAny: c.own.claimsAny, Generation: c.own.generation, ForceGuard: true, MaxBytes: int32(c.cfg.MaxBatchBytes)})...)
	t.Logf("a new relay's claim (floor 0) touched %d buffers", fresh)
	// Measured: 884,348 buffers with the probes bounded by the scan's
	// start (each walks its aggregate's 3,000 dead entries), 10,444 now
	// (one walk of the seq index to the first unpublished row, then short
	// probes).
	if fresh > 50000 {
		t.Errorf("a claim from floor 0 touched %d buffers: the guard's probes walk the aggregates' dead index entries", fresh)
	}

	// A mark of 200 claimed rows probes outbox_unpublished_seq_idx. (The
	// plan make soak caught, a full scan of outbox_unpublished_aggregate_idx
	// with a filter, 637 ms for 200 rows, came from statistics this test
	// does not reproduce: it checks the mark's cost stays that of probes.)
	b, err := c.Claim(ctx)
	if err != nil || len(b.Rows) < 200 {
		t.Fatalf("claim: %v (%d rows)", err, len(b.Rows))
	}
	if _, err := db.Pool.Exec(ctx, "ANALYZE outbox"); err != nil {
		t.Fatal(err)
	}
	seqs := make([]int64, 200)
	for i := range seqs {
		seqs[i] = b.Rows[i].Seq
	}
	mark := explainBuffers(t, c, c.rows.mark.SQL, c.rows.mark.Args(c.created.args(b.Token, seqs))...)
	t.Logf("a mark of 200 rows touched %d buffers", mark)
	if mark > 5000 {
		t.Errorf("a mark of 200 rows touched %d buffers: it walks an index instead of probing outbox_unpublished_seq_idx", mark)
	}
}

// publishRounds inserts rounds times 1,000 rows of 20 aggregates, each
// round claimed and marked published by a relay as a relay does, which
// then leaves (a relay started afterwards owns every partition).
func publishRounds(t *testing.T, pool *pgxpool.Pool, rounds int) {
	t.Helper()
	ctx := context.Background()
	pub, err := New(pool, lease.Config{RelayID: "pub", BatchSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for round := 0; round < rounds; round++ {
		if _, err := pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload)
SELECT gen_random_uuid(), 'agg-' || (g % 20), 't', '{}' FROM generate_series(1, 1000) g`); err != nil {
			t.Fatal(err)
		}
		b, err := pub.Claim(ctx)
		if err != nil {
			t.Fatal(err)
		}
		seqs := make([]int64, len(b.Rows))
		for i, r := range b.Rows {
			seqs[i] = r.Seq
		}
		if _, err := pub.MarkPublished(ctx, b.Token, seqs); err != nil {
			t.Fatal(err)
		}
		pub.Settled(b.Token, time.Time{})
	}
	if err := pub.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// genericClaimPlan returns the text of the generic plan PostgreSQL makes
// for the claim statement on the table as it is now (settings applied
// first when withSettings), as the cached statement of a relay that idled
// on an empty table gets it: after five executions the plan cache switches
// to the generic plan if it looks no dearer than the custom ones.
func genericClaimPlan(t *testing.T, c *Claimer, withSettings bool) string {
	t.Helper()
	ctx := context.Background()
	tx := planTx(t, c, withSettings)
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "PREPARE claim_generic(int, bigint, text, uuid, bigint, bigint, text, bool[], bool, bigint, bool, int, timestamptz, bigint) AS "+c.rows.claim.SQL); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(ctx, "EXPLAIN EXECUTE claim_generic(500, 30000, 'h', '"+uuid.NewString()+"', 0, 0, 'h', '{t}', true, 0, true, 16777216, NULL, 0)")
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	// A prepared statement outlives the transaction: the session's.
	if _, err := tx.Exec(ctx, "DEALLOCATE claim_generic"); err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

// TestClaimGenericPlanUsesTheIndex: the claim's generic plan, made while
// the table's statistics say it is empty (what autovacuum's ANALYZE leaves
// after every event was published and deleted), must still read
// outbox_unpublished_seq_idx in order, with no sequential scan and no sort
// of the table: a relay idle for 30 s then drained a burst of 100,000
// events at 0.28x the rate of a fresh relay (issue 11) because its cached
// claim kept such a plan. The plan settings (sql/plan_settings.SQL) are what keeps
// it on the index; without them the same statement plans a sequential scan.
func TestClaimGenericPlanUsesTheIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	c, err := New(db.Pool, lease.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, "ANALYZE outbox"); err != nil {
		t.Fatal(err)
	}
	plan := genericClaimPlan(t, c, true)
	// One Sort is expected: of the batch's own rows (the CTE scan, at most
	// BatchSize of them), for the running sum of the byte bound, and only
	// run when the batch's payloads reach it.
	batchSorts := len(regexp.MustCompile(`Sort Key: scan(_\d+)?\.seq\n`).FindAllString(plan+"\n", -1))
	if strings.Contains(plan, "Seq Scan on outbox ") || strings.Count(plan, "->  Sort ") != batchSorts || batchSorts > 1 || !strings.Contains(plan, "outbox_unpublished_seq_idx") {
		t.Fatalf("generic claim plan on an empty table, with the plan settings:\n%s\nwant outbox_unpublished_seq_idx, no Seq Scan on outbox, no Sort but of the batch's rows", plan)
	}
	without := genericClaimPlan(t, c, false)
	t.Logf("without the plan settings:\n%s", without)
}
