package sql_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/sqladmin"
	"github.com/pgoutbox/outbox/internal/testenv"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

// migrateTimePartitioned creates the time-partitioned outbox table in db.
func migrateTimePartitioned(t *testing.T, db *testenv.TestDB, ahead int) {
	t.Helper()
	if _, err := outboxsql.MigrateWith(context.Background(), db.Pool, outboxsql.MigrateOptions{TimePartitioned: true, TimePartitionsAhead: ahead}); err != nil {
		t.Fatal(err)
	}
}

// partitionNames lists the table's leaf partitions by name.
func partitionNames(t *testing.T, db *testenv.TestDB, table string) []string {
	t.Helper()
	parts, err := sqladmin.ListTimePartitions(context.Background(), db.Pool, table)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range parts {
		out = append(out, p.Name)
	}
	return out
}

// migrate --time-partitioned: the table is partitioned by RANGE
// (created_at) with the plain table's columns, defaults, triggers and
// indexes; the partitions of today and the days ahead exist with the
// storage parameters, plus a DEFAULT partition; a second run changes
// nothing, a different interval is refused, as is --time-partitioned on an
// existing plain table.
func TestMigrateTimePartitioned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.DB(t)
	migrateTimePartitioned(t, db, 3)
	var now time.Time
	if err := db.Pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	day := now.UTC().Truncate(24 * time.Hour)
	var want []string
	for i := 0; i <= 3; i++ { // today and 3 days ahead
		want = append(want, sqladmin.TimePartitionName("outbox", day.Add(time.Duration(i)*24*time.Hour)))
	}
	want = append(want, "outbox_default")
	if got := partitionNames(t, db, "outbox"); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("partitions %v, want %v", got, want)
	}
	// Every partition has the plain table's storage parameters, triggers
	// and the claim's indexes.
	rows, err := db.Pool.Query(ctx, `SELECT c.relname::text, array_to_string(c.reloptions, ','),
  (SELECT count(*) FROM pg_trigger g WHERE g.tgrelid = c.oid),
  (SELECT count(*) FROM pg_index i WHERE i.indrelid = c.oid)
FROM pg_inherits h JOIN pg_class c ON c.oid = h.inhrelid WHERE h.inhparent = 'outbox'::regclass`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name, opts string
		var triggers, indexes int
		if err := rows.Scan(&name, &opts, &triggers, &indexes); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(opts, "fillfactor=40") || !strings.Contains(opts, "vacuum_index_cleanup=on") || !strings.Contains(opts, "autovacuum_vacuum_scale_factor=0.01") {
			t.Errorf("partition %s options %q, want the outbox table's", name, opts)
		}
		if triggers != 3 || indexes != 5 {
			t.Errorf("partition %s: %d triggers and %d indexes, want 3 (key partition, row checks) and 5", name, triggers, indexes)
		}
	}
	rows.Close()
	// A plain INSERT gets its seq, key partition and row checks.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type) VALUES (gen_random_uuid(), 'a', 't')`); err != nil {
		t.Fatal(err)
	}
	var seq int64
	var kp *int32
	var part string
	if err := db.Pool.QueryRow(ctx, `SELECT seq, key_partition, tableoid::regclass::text FROM outbox`).Scan(&seq, &kp, &part); err != nil {
		t.Fatal(err)
	}
	if seq != 1 || kp == nil || part != want[0] {
		t.Fatalf("row: seq %d key_partition %v in %s, want seq 1, a key partition, in %s", seq, kp, part, want[0])
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type) VALUES (gen_random_uuid(), '', 't')`); err == nil || !strings.Contains(err.Error(), "outbox_aggregate_id_check") {
		t.Fatalf("empty aggregate ID: %v, want the row check", err)
	}
	// An event older than every partition goes to the DEFAULT partition.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, created_at) VALUES (gen_random_uuid(), 'a', 't', now() - interval '30 days')`); err != nil {
		t.Fatal(err)
	}
	if res, err := outboxsql.MigrateWith(ctx, db.Pool, outboxsql.MigrateOptions{TimePartitioned: true, TimePartitionsAhead: 3}); err != nil || len(res) != 0 {
		t.Fatalf("second migrate: %v %v, want nothing applied", res, err)
	}
	if _, err := outboxsql.MigrateWith(ctx, db.Pool, outboxsql.MigrateOptions{TimePartitioned: true, TimePartitionInterval: time.Hour}); err == nil || !strings.Contains(err.Error(), "cannot change") {
		t.Fatalf("another interval: %v, want refused", err)
	}
	if _, err := outboxsql.Migrate(ctx, db.Pool); err != nil {
		t.Fatalf("migrate without the flag on a time-partitioned table: %v", err)
	}
	tp, err := sqladmin.ReadTimePartitioning(ctx, db.Pool, "outbox")
	if err != nil || tp.Interval != 24*time.Hour || tp.Ahead != 3 {
		t.Fatalf("time partitioning %+v %v, want 24h, 3 ahead", tp, err)
	}

	plain := testenv.MigratedDB(t)
	if _, err := outboxsql.MigrateWith(ctx, plain.Pool, outboxsql.MigrateOptions{TimePartitioned: true}); err == nil || !strings.Contains(err.Error(), "not partitioned") {
		t.Fatalf("--time-partitioned on a plain table: %v, want refused", err)
	}
	if tp, err := sqladmin.ReadTimePartitioning(ctx, plain.Pool, "outbox"); err != nil || tp.Interval != 0 {
		t.Fatalf("plain table's time partitioning %+v %v, want none", tp, err)
	}
	if created, err := sqladmin.EnsureTimePartitions(ctx, plain.Pool, "outbox"); err != nil || len(created) != 0 {
		t.Fatalf("EnsureTimePartitions on a plain table: %v %v, want nothing", created, err)
	}
}

// The case: a row whose created_at falls in a partition not yet
// created sits in the DEFAULT partition; a later migrate with more
// partitions ahead creates them all, that one included, and moves the row
// into it with every column as it was (a leased row keeps its lease);
// the stored ahead is the new one.
func TestMigrateMovesDefaultRowsIntoNewPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.DB(t)
	opts := outboxsql.MigrateOptions{TimePartitioned: true, TimePartitionInterval: time.Hour, TimePartitionsAhead: 1}
	if _, err := outboxsql.MigrateWith(ctx, db.Pool, opts); err != nil {
		t.Fatal(err)
	}
	const cols = `seq, id, aggregate_id, created_at, locked_until, locked_by, claim_token, attempts, key_partition`
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, created_at) VALUES (gen_random_uuid(), 'a', 't', now() + interval '3 hours')`); err != nil {
		t.Fatal(err)
	}
	// Leased, as a relay's claim leaves it.
	var before string
	err := db.Pool.QueryRow(ctx, `UPDATE outbox SET locked_until = now() + interval '10 minutes', locked_by = 'relay-1', claim_token = gen_random_uuid(), attempts = 1
RETURNING row(`+cols+`)::text`).Scan(&before)
	if err != nil {
		t.Fatal(err)
	}
	var created time.Time
	if err := db.Pool.QueryRow(ctx, `SELECT created_at FROM outbox`).Scan(&created); err != nil {
		t.Fatal(err)
	}
	opts.TimePartitionsAhead = 5
	if _, err := outboxsql.MigrateWith(ctx, db.Pool, opts); err != nil {
		t.Fatalf("migrate --time-partitions-ahead 5 with a row of a coming partition in DEFAULT: %v", err)
	}
	want := sqladmin.TimePartitionName("outbox", created.UTC().Truncate(time.Hour))
	var after, part string
	if err := db.Pool.QueryRow(ctx, `SELECT row(`+cols+`)::text, tableoid::regclass::text FROM outbox`).Scan(&after, &part); err != nil {
		t.Fatal(err)
	}
	if part != want || after != before {
		t.Fatalf("row %s in %s, want %s in %s", after, part, before, want)
	}
	if got := partitionNames(t, db, "outbox"); len(got) != 7 { // the current hour, 5 ahead, DEFAULT
		t.Fatalf("partitions %v, want 6 and DEFAULT", got)
	}
	if tp, err := sqladmin.ReadTimePartitioning(ctx, db.Pool, "outbox"); err != nil || tp.Ahead != 5 {
		t.Fatalf("time partitioning %+v %v, want 5 ahead", tp, err)
	}
}

// A partition that cannot be created (here a table of its name, not a
// partition, is in the way) fails migrate with an error naming it, and
// migrate changes nothing: no partition is created, the stored ahead is
// the old one. The relays' EnsureTimePartitions creates the others and
// names that one.
func TestMigrateChangesNothingItCouldNotApply(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.DB(t)
	opts := outboxsql.MigrateOptions{TimePartitioned: true, TimePartitionInterval: time.Hour, TimePartitionsAhead: 1}
	if _, err := outboxsql.MigrateWith(ctx, db.Pool, opts); err != nil {
		t.Fatal(err)
	}
	var now time.Time
	if err := db.Pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	blocked := sqladmin.TimePartitionName("outbox", now.UTC().Truncate(time.Hour).Add(3*time.Hour))
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE `+blocked+` (x int)`); err != nil {
		t.Fatal(err)
	}
	before := partitionNames(t, db, "outbox")
	opts.TimePartitionsAhead = 5
	_, err := outboxsql.MigrateWith(ctx, db.Pool, opts)
	if err == nil || !strings.Contains(err.Error(), blocked) {
		t.Fatalf("migrate with partition %s blocked: %v, want an error naming it", blocked, err)
	}
	if got := partitionNames(t, db, "outbox"); strings.Join(got, " ") != strings.Join(before, " ") {
		t.Fatalf("partitions %v after a failed migrate, want %v", got, before)
	}
	if tp, err := sqladmin.ReadTimePartitioning(ctx, db.Pool, "outbox"); err != nil || tp.Ahead != 1 {
		t.Fatalf("time partitioning %+v %v after a failed migrate, want 1 ahead still", tp, err)
	}
	created, err := sqladmin.CreateTimePartitions(ctx, db.Pool, "outbox", now, now.Add(5*time.Hour+time.Second))
	if err == nil || !strings.Contains(err.Error(), blocked) || len(created) != 3 {
		t.Fatalf("CreateTimePartitions: created %v, %v; want the 3 others created and %s named", created, err, blocked)
	}
}
