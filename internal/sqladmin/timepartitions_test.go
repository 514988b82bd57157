package sqladmin_test

import (
	"context"
	"sync"
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
