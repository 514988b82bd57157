package sqladmin_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

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

// Several relays keeping the partitions at once: each partition is
// created once, none fails; the partitions of days ahead appear once the
// database's day moves on (CreateTimePartitions for a later range stands
// in for the clock).
func TestEnsureTimePartitionsConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.DB(t)
	migrateTimePartitioned(t, db, 2)
	before := partitionNames(t, db, "outbox")
	var now time.Time
	if err := db.Pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	created := make([][]string, 4)
	errs := make([]error, 4)
	for i := range created {
		wg.Add(1)
		go func() {
			defer wg.Done()
			created[i], errs[i] = sqladmin.CreateTimePartitions(ctx, db.Pool, "outbox", now, now.Add(5*24*time.Hour))
		}()
	}
	wg.Wait()
	total := 0
	for i := range created {
		if errs[i] != nil {
			t.Fatalf("keeper %d: %v", i, errs[i])
		}
		total += len(created[i])
	}
	after := partitionNames(t, db, "outbox")
	// now + 5 days reaches 3 days past today + 2 ahead.
	if total != 3 || len(after) != len(before)+3 {
		t.Fatalf("created %v (%d in all); partitions %v, want 3 new after %v", created, total, after, before)
	}
	if c, err := sqladmin.EnsureTimePartitions(ctx, db.Pool, "outbox"); err != nil || len(c) != 0 {
		t.Fatalf("ensure again: %v %v, want nothing to do", c, err)
	}
}

// A leased row in the DEFAULT partition whose range gets its partition is
// moved into it while a claim's transaction runs and a mark of the row
// waits: the partition is created once the claim ends, and the mark,
// which ran into the move, finds the row in its new partition (its lease
// kept) and marks it. Had the mark looked for the row in the DEFAULT
// partition only, the lease would be lost and the row published again.
func TestMoveFromDefaultKeepsAWaitingMark(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.DB(t)
	if _, err := outboxsql.MigrateWith(ctx, db.Pool, outboxsql.MigrateOptions{TimePartitioned: true, TimePartitionInterval: time.Hour, TimePartitionsAhead: 1}); err != nil {
		t.Fatal(err)
	}
	var seq int64
	var token string
	err := db.Pool.QueryRow(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, created_at, locked_until, locked_by, claim_token)
VALUES (gen_random_uuid(), 'a', 't', now() + interval '3 hours', now() + interval '10 minutes', 'relay-1', gen_random_uuid())
RETURNING seq, claim_token::text`).Scan(&seq, &token)
	if err != nil {
		t.Fatal(err)
	}
	conn := func() (*pgxpool.Conn, int32) {
		c, err := db.Pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Release)
		var pid int32
		if err := c.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			t.Fatal(err)
		}
		return c, pid
	}
	blockedBy := func(pid int32) bool {
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, pid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	// A claim's transaction, open on the table.
	claim, claimPID := conn()
	if _, err := claim.Exec(ctx, `BEGIN; UPDATE outbox SET attempts = attempts WHERE seq < 0`); err != nil {
		t.Fatal(err)
	}
	var now time.Time
	if err := db.Pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	type result struct {
		created []string
		err     error
	}
	done := make(chan result, 1)
	go func() {
		c, err := sqladmin.CreateTimePartitions(ctx, db.Pool, "outbox", now, now.Add(5*time.Hour))
		done <- result{c, err}
	}()
	testenv.Eventually(t, 30*time.Second, func() bool { return blockedBy(claimPID) }, "partition creation never waited for the claim")
	mark, markPID := conn()
	marked := make(chan error, 1)
	var n int64
	go func() {
		tag, err := mark.Exec(ctx, `UPDATE outbox SET published_at = now(), locked_until = NULL WHERE seq = $1 AND claim_token = $2::uuid AND locked_by = 'relay-1'`, seq, token)
		n = tag.RowsAffected()
		marked <- err
	}()
	testenv.Eventually(t, 30*time.Second, func() bool {
		var waiting bool
		if err := db.Pool.QueryRow(ctx, `SELECT cardinality(pg_blocking_pids($1)) > 0`, markPID).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		return waiting
	}, "the mark never waited")
	if _, err := claim.Exec(ctx, `COMMIT`); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || len(r.created) != 4 {
		t.Fatalf("created %v, %v; want 4 partitions", r.created, r.err)
	}
	if err := <-marked; err != nil || n != 1 {
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			t.Log(pe.Detail)
		}
		t.Fatalf("the waiting mark: %d rows, %v; want the moved row marked", n, err)
	}
	var part string
	if err := db.Pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM outbox WHERE seq = $1 AND published_at IS NOT NULL`, seq).Scan(&part); err != nil {
		t.Fatal(err)
	}
	if part == "outbox_default" {
		t.Fatalf("the row is still in %s", part)
	}
}
