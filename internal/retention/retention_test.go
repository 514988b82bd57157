package retention_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/outbox/internal/retention"
	"github.com/pgoutbox/outbox/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// seedRest inserts rows the cleaner must keep, all created 30 days ago:
// 7 published an hour ago, 4 unpublished, 2 dead letters (held and
// skipped) and a leased row.
func seedRest(t *testing.T, db *testenv.TestDB) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), `
INSERT INTO outbox (id, aggregate_id, event_type, payload, created_at, published_at)
SELECT gen_random_uuid(), 'recent' || i, 'recent-published', '{}', now() - interval '30 days', now() - interval '1 hour'
FROM generate_series(1, 7) i;
INSERT INTO outbox (id, aggregate_id, event_type, payload, created_at)
SELECT gen_random_uuid(), 'pending' || i, 'unpublished', '{}', now() - interval '30 days' FROM generate_series(1, 4) i;
INSERT INTO outbox (id, aggregate_id, event_type, payload, created_at, dead_lettered_at, locked_until, attempts, last_error)
VALUES (gen_random_uuid(), 'dl1', 'dead-letter', '{}', now() - interval '30 days', now() - interval '29 days', 'infinity', 16, 'boom'),
       (gen_random_uuid(), 'dl2', 'dead-letter', '{}', now() - interval '30 days', now() - interval '29 days', NULL, 3, 'too large');
INSERT INTO outbox (id, aggregate_id, event_type, payload, created_at, locked_by, locked_until, claim_token)
VALUES (gen_random_uuid(), 'leased', 'leased', '{}', now() - interval '30 days', 'r1', now() + interval '1 minute', gen_random_uuid());`,
	)
	if err != nil {
		t.Fatal(err)
	}
}

// seedN inserts n rows published 10 days ago (and up to n seconds more).
func seedN(t *testing.T, db *testenv.TestDB, oldPublished int) {
	t.Helper()
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload, created_at, published_at)
SELECT gen_random_uuid(), 'old' || i, 'old-published', '{}', now() - interval '30 days', now() - interval '10 days' - i * interval '1 second'
FROM generate_series(1, $1::int) i`, oldPublished); err != nil {
		t.Fatal(err)
	}
}

func counts(t *testing.T, db *testenv.TestDB) map[string]int {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), "SELECT event_type, count(*) FROM outbox GROUP BY event_type")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		out[k] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// countingDB records the rows each statement affected.
type countingDB struct {
	retention.DB
	mu   sync.Mutex
	rows []int64
}

func (c *countingDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tag, err := c.DB.Exec(ctx, sql, args...)
	if err == nil {
		c.mu.Lock()
		c.rows = append(c.rows, tag.RowsAffected())
		c.mu.Unlock()
	}
	return tag, err
}

func TestDeletesOnlyOldPublishedRowsInBoundedBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	seedRest(t, db)
	seedN(t, db, 2500)
	cdb := &countingDB{DB: db.Pool}
	c, err := retention.New(retention.Config{Retention: 7 * 24 * time.Hour, BatchSize: 1000}, cdb, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Clean(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p.Deleted != 2500 || p.Batches != 3 || p.LargestBatch != 1000 {
		t.Fatalf("pass %+v, want 2500 deleted in 3 batches of at most 1000", p)
	}
	if got := cdb.rows; len(got) != 3 || got[0] != 1000 || got[1] != 1000 || got[2] != 500 {
		t.Fatalf("rows per statement %v, want [1000 1000 500]", got)
	}
	want := map[string]int{"recent-published": 7, "unpublished": 4, "dead-letter": 2, "leased": 1}
	if got := counts(t, db); !equal(got, want) {
		t.Fatalf("rows left %v, want %v", got, want)
	}
	// A second pass finds nothing: one statement, no row.
	p, err = c.Clean(ctx)
	if err != nil || p.Deleted != 0 || p.Batches != 1 {
		t.Fatalf("second pass %+v %v", p, err)
	}
	if s := c.Stats(); s.Deleted != 2500 || s.Batches != 4 || s.Passes != 2 || s.Errors != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestZeroRetentionDeletesEveryPublishedRowButNeverDeadLetters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	seedRest(t, db)
	seedN(t, db, 10)
	c, err := retention.New(retention.Config{Retention: 0}, db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Config().Interval != time.Second {
		t.Fatalf("interval with retention 0: %s, want 1s", c.Config().Interval)
	}
	p, err := c.Clean(ctx)
	if err != nil || p.Deleted != 17 {
		t.Fatalf("pass %+v %v, want 17 published rows deleted", p, err)
	}
	want := map[string]int{"unpublished": 4, "dead-letter": 2, "leased": 1}
	if got := counts(t, db); !equal(got, want) {
		t.Fatalf("rows left %v, want %v", got, want)
	}
}

func TestRunCleansEveryIntervalAndStops(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	db := testenv.MigratedDB(t)
	c, err := retention.New(retention.Config{Retention: time.Hour, Interval: 20 * time.Millisecond, BatchSize: 3}, db.Pool, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = c.Run(ctx); close(done) }()
	// Rows published 10 days ago appear after the cleaner started.
	seedN(t, db, 8)
	testenv.Eventually(t, 10*time.Second, func() bool { return c.Stats().Deleted == 8 }, "deleted %d of 8", c.Stats().Deleted)
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if got := counts(t, db); len(got) != 0 {
		t.Fatalf("rows left %v", got)
	}
}

// TestConcurrentCleanersDoNotWaitForEachOther: two cleaners (two relays)
// delete everything between them, each row once.
func TestConcurrentCleaners(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	seedN(t, db, 5000)
	var wg sync.WaitGroup
	total := make([]int64, 2)
	for i := range total {
		c, err := retention.New(retention.Config{Retention: time.Hour, BatchSize: 100, Pause: -1}, db.Pool, nil)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				p, err := c.Clean(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				total[i] += p.Deleted
				if p.Deleted == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	if total[0]+total[1] != 5000 {
		t.Fatalf("deleted %v, want 5000 in all", total)
	}
}

func TestDeleteUsesThePublishedAtIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	seedN(t, db, 20000)
	if _, err := db.Pool.Exec(ctx, "INSERT INTO outbox (id, aggregate_id, event_type, payload, published_at) SELECT gen_random_uuid(), 'n', 'recent-published', '{}', now() FROM generate_series(1, 20000); ANALYZE outbox"); err != nil {
		t.Fatal(err)
	}
	var plan strings.Builder
	c, err := retention.New(retention.Config{Retention: retention.DefaultRetention}, db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := db.Pool.Query(ctx, "EXPLAIN "+c.DeleteSQL(), retention.DefaultRetention.Microseconds(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var l string
		_ = rows.Scan(&l)
		plan.WriteString(l + "\n")
	}
	if !strings.Contains(plan.String(), "outbox_published_at_idx") || strings.Contains(plan.String(), "Seq Scan") {
		t.Fatalf("retention delete does not use outbox_published_at_idx:\n%s", plan.String())
	}
}

func TestConfigValidateNamesTheField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  retention.Config
		want string
	}{
		{retention.Config{Retention: -time.Second}, "Config.Retention"},
		{retention.Config{BatchSize: -1}, "Config.BatchSize"},
		{retention.Config{BatchSize: retention.MaxBatchSize + 1}, "Config.BatchSize"},
		{retention.Config{Interval: time.Millisecond}, "Config.Interval"},
		{retention.Config{Table: "a.b.c"}, "Config.Table"},
	} {
		if err := tc.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
	c := retention.Config{Retention: retention.DefaultRetention}
	d := c.WithDefaults()
	if err := c.Validate(); err != nil || d.Interval != time.Minute || d.BatchSize != 1000 || d.Table != "outbox" {
		t.Errorf("defaults: %+v %v", d, err)
	}
	if c.Interval != 0 {
		t.Errorf("Validate changed the config: %+v", c)
	}
}

func equal(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
