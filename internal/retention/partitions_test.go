package retention_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/retention"
	"github.com/pgoutbox/outbox/internal/sqladmin"
	"github.com/pgoutbox/outbox/internal/testenv"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

// timePartitionedDB returns a database whose outbox table is partitioned
// by day (migrate --time-partitioned), with the partitions of the 6 days
// before today too.
func timePartitionedDB(t *testing.T) *testenv.TestDB {
	t.Helper()
	ctx := context.Background()
	db := testenv.DB(t)
	if _, err := outboxsql.MigrateWith(ctx, db.Pool, outboxsql.MigrateOptions{TimePartitioned: true, TimePartitionsAhead: 1}); err != nil {
		t.Fatal(err)
	}
	var now time.Time
	if err := db.Pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	if _, err := sqladmin.CreateTimePartitions(ctx, db.Pool, "outbox", now.Add(-6*24*time.Hour), now); err != nil {
		t.Fatal(err)
	}
	return db
}

// partitionOf returns the name of the partition that holds the day
// daysAgo days before the database's today.
func partitionOf(t *testing.T, db *testenv.TestDB, daysAgo int) string {
	t.Helper()
	var now time.Time
	if err := db.Pool.QueryRow(context.Background(), `SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	return sqladmin.TimePartitionName("outbox", now.UTC().Truncate(24*time.Hour).Add(-time.Duration(daysAgo)*24*time.Hour))
}

func partitions(t *testing.T, db *testenv.TestDB) []string {
	t.Helper()
	ps, err := sqladmin.ListTimePartitions(context.Background(), db.Pool, "outbox")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

// insert adds an event created daysAgo days ago at noon, published
// publishedAgo ago (nil: unpublished), dead-lettered if dead.
func insert(t *testing.T, db *testenv.TestDB, daysAgo int, publishedAgo *time.Duration, dead bool) {
	t.Helper()
	var pub any
	if publishedAgo != nil {
		pub = publishedAgo.Microseconds()
	}
	if _, err := db.Pool.Exec(context.Background(), `INSERT INTO outbox (id, aggregate_id, event_type, payload, created_at, published_at, dead_lettered_at)
VALUES (gen_random_uuid(), 'a', 't', '{}', date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - $1 * interval '1 day' + interval '12 hours',
  now() - $2 * interval '1 microsecond', CASE WHEN $3 THEN now() END)`, daysAgo, pub, dead); err != nil {
		t.Fatal(err)
	}
}

func ago(d time.Duration) *time.Duration { return &d }

// Retention with DropPartitions drops a whole partition only once every
// row in it is published and the last was published longer than the
// retention ago, and the partition's range has passed that too: a
// partition holding one unpublished row, or a dead letter, is kept, as is
// one whose rows were published recently, today's and the DEFAULT
// partition (whose old published rows are deleted row by row instead).
func TestDropPartitionsDropsOnlyFullyPublishedOldOnes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := timePartitionedDB(t)
	day := 24 * time.Hour
	for i := 0; i < 50; i++ {
		insert(t, db, 6, ago(5*day), false)     // all published long ago: dropped
		insert(t, db, 5, ago(4*day), false)     // and a dead letter: kept
		insert(t, db, 4, ago(4*day), false)     // and an unpublished row: kept
		insert(t, db, 3, ago(time.Hour), false) // published an hour ago: kept
		insert(t, db, 0, ago(3*day), false)     // today's: kept
	}
	insert(t, db, 5, nil, true)
	insert(t, db, 4, nil, false)
	// Days 2 and 1 are empty, but end later than the retention ago.
	// The DEFAULT partition: two old published rows, one unpublished.
	for _, ago := range []string{"5 days", "5 days", ""} {
		pub := "NULL::timestamptz"
		if ago != "" {
			pub = "now() - interval '" + ago + "'"
		}
		if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload, created_at, published_at)
VALUES (gen_random_uuid(), 'd', 't', '{}', now() - interval '60 days', `+pub+`)`); err != nil {
			t.Fatal(err)
		}
	}
	before := partitions(t, db)
	c, err := retention.New(retention.Config{Retention: 2 * day, DropPartitions: true}, db.Pool, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Clean(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{partitionOf(t, db, 6)}
	if !slices.Equal(p.DroppedPartitions, want) || p.Deleted != 2 {
		t.Fatalf("dropped %v and deleted %d rows, want %v and the 2 old published rows of the DEFAULT partition", p.DroppedPartitions, p.Deleted, want)
	}
	after := partitions(t, db)
	if len(after) != len(before)-1 || slices.Contains(after, want[0]) || !slices.Contains(after, "outbox_default") {
		t.Fatalf("partitions %v after the pass, were %v", after, before)
	}
	var unpublished, dead, total int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE published_at IS NULL), count(*) FILTER (WHERE dead_lettered_at IS NOT NULL), count(*) FROM outbox`).Scan(&unpublished, &dead, &total); err != nil {
		t.Fatal(err)
	}
	if unpublished != 3 || dead != 1 || total != 4*50+3 {
		t.Fatalf("%d unpublished, %d dead letters, %d rows left, want 3, 1, %d", unpublished, dead, total, 4*50+3)
	}
	// Once the unpublished row of day 4 is published (long ago), its
	// partition goes at the next pass; day 5's dead letter keeps its own.
	if _, err := db.Pool.Exec(ctx, `UPDATE outbox SET published_at = now() - interval '3 days' WHERE published_at IS NULL AND dead_lettered_at IS NULL AND aggregate_id = 'a'`); err != nil {
		t.Fatal(err)
	}
	if p, err = c.Clean(ctx); err != nil || !slices.Equal(p.DroppedPartitions, []string{partitionOf(t, db, 4)}) {
		t.Fatalf("second pass dropped %v (%v), want %s", p.DroppedPartitions, err, partitionOf(t, db, 4))
	}
	if s := c.Stats(); s.DroppedPartitions != 2 {
		t.Fatalf("stats %+v, want 2 partitions dropped", s)
	}
}

// On a partitioned table, the row-by-row DELETE names rows by partition
// and ctid: an old published row and an unpublished one at the same ctid
// in another partition, only the published one goes. DropPartitions on a
// plain table fails each pass, saying why.
func TestPartitionedDeleteKeepsNamesakes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := timePartitionedDB(t)
	insert(t, db, 5, ago(4*24*time.Hour), false)
	insert(t, db, 0, nil, false)
	var ctids []string
	rows, err := db.Pool.Query(ctx, `SELECT ctid::text FROM outbox`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		_ = rows.Scan(&s)
		ctids = append(ctids, s)
	}
	rows.Close()
	if len(ctids) != 2 || ctids[0] != ctids[1] {
		t.Fatalf("ctids %v, want two equal", ctids)
	}
	c, err := retention.New(retention.Config{Retention: time.Hour}, db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := c.Clean(ctx); err != nil || p.Deleted != 1 {
		t.Fatalf("pass: %+v %v, want 1 row deleted", p, err)
	}
	var left int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE published_at IS NULL`).Scan(&left); err != nil || left != 1 {
		t.Fatalf("%d unpublished rows left (%v), want 1", left, err)
	}

	plain := testenv.MigratedDB(t)
	c, err = retention.New(retention.Config{Retention: time.Hour, DropPartitions: true}, plain.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Clean(ctx); err == nil || !strings.Contains(err.Error(), "not partitioned") {
		t.Fatalf("DropPartitions on a plain table: %v, want an error saying it is not partitioned", err)
	}
}
