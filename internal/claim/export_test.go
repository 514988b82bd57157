package claim

import (
	"context"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/sqladmin"
	"github.com/pgoutbox/outbox/internal/testenv"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

// DisableResume makes every claim of c scan from the floor, as if no claim
// were ever full (BenchmarkDrainScan's comparison).
func DisableResume(c *Claimer) { c.fl.noResume = true }

// LastAdvance is when c last moved its floor: tests count floor advances
// with it instead of waiting for a time to pass.
func LastAdvance(c *Claimer) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fl.lastAdvance
}

// KillPresence ends c's presence session as a process's death would: the
// lock is freed by the server and the declaration stays behind.
// It returns once the server has freed the lock: the backend ends after
// the client closed the connection, not with it.
func KillPresence(c *Claimer) {
	c.pres.declared.Store(false) // no Undeclare on the way out
	c.pres.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		conn, err := c.pool.Acquire(ctx)
		if err != nil {
			return
		}
		var free bool
		err = conn.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtextextended($1::text, 0))", c.pres.key).Scan(&free)
		if err == nil && free {
			_, _ = conn.Exec(ctx, "SELECT pg_advisory_unlock(hashtextextended($1::text, 0))", c.pres.key)
		}
		conn.Release()
		if err == nil && free {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// PresenceDeclared reports whether c's last beat declared its presence.
func PresenceDeclared(c *Claimer) bool { return c.pres != nil && c.pres.declared.Load() }

// TimePartitionedDB returns a database whose outbox table is partitioned
// by day of created_at (migrate --time-partitioned), with the partitions
// of the days back days before today too.
func TimePartitionedDB(t testing.TB, back int) *testenv.TestDB {
	t.Helper()
	ctx := context.Background()
	db := testenv.DB(t)
	if _, err := outboxsql.MigrateWith(ctx, db.Pool, outboxsql.MigrateOptions{TimePartitioned: true, TimePartitionsAhead: 2}); err != nil {
		t.Fatal(err)
	}
	var now time.Time
	if err := db.Pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	if _, err := sqladmin.CreateTimePartitions(ctx, db.Pool, "outbox", now.Add(-time.Duration(back)*24*time.Hour), now); err != nil {
		t.Fatal(err)
	}
	return db
}
