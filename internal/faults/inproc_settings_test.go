package faults

// Database settings a DBA may set that the relay already survives (issue
// 20's "keep what already holds"): default_transaction_isolation
// repeatable read or serializable, lock_timeout 5ms, statement_timeout
// 50ms, set on the relay's database (ALTER DATABASE ... SET), which every
// session of the relay and the writers gets (these relays' pools are the
// test's, without relay.ConfigurePool, so statement_timeout reaches them
// too). Each test first makes one claim fail with the setting's error,
// deterministically, by holding the claims' advisory lock, and checks that
// the claim is retried and the event published; then two relays under load
// lose and reorder nothing.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/sqlname"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/relay"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

// settingsDB returns a migrated database of the test's own whose settings
// (ALTER DATABASE ... SET) are settings, with a pool opened after they were
// set, and a pool for the test's own checks that overrides them (a
// serializable read may fail with 40001 too).
func settingsDB(t *testing.T, settings map[string]string) (db *testenv.TestDB, check *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	d := testenv.Database(t)
	if _, err := outboxsql.Migrate(ctx, d.Pool); err != nil {
		t.Fatal(err)
	}
	var name string
	if err := d.Pool.QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	for k, v := range settings {
		if _, err := d.Pool.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" SET "+k+" = "+sqlname.Literal(v)); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := pgxpool.ParseConfig(d.ConnString)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	for k, v := range settings {
		// This read runs under the setting it checks: a statement_timeout
		// of 50 ms can cancel it on a loaded machine (57014), which shows
		// the setting is there but not its value; read it again then.
		var got string
		var err error
		for range 10 {
			var pgErr *pgconn.PgError
			if err = pool.QueryRow(ctx, "SELECT current_setting($1)", k).Scan(&got); !errors.As(err, &pgErr) || (pgErr.Code != "57014" && pgErr.Code != "55P03") {
				break
			}
		}
		if err != nil || got != v {
			t.Fatalf("%s in a new session: %q (%v), want %q", k, got, err, v)
		}
	}
	ccfg := cfg.Copy()
	for k, v := range map[string]string{"default_transaction_isolation": "read committed", "lock_timeout": "0", "statement_timeout": "0"} {
		ccfg.ConnConfig.RuntimeParams[k] = v
	}
	check, err = pgxpool.NewWithConfig(ctx, ccfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(check.Close)
	return &testenv.TestDB{Pool: pool, ConnString: d.ConnString, Schema: "public"}, check
}

// claimErrors records the SQLSTATEs of the relays' failed claims.
type claimErrors struct {
	mu    sync.Mutex
	codes map[string]int
}

func (c *claimErrors) observer() relay.Observer {
	return relay.ObserverFuncs{OnClaimed: func(_ time.Duration, _, _ int, err error) {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			c.mu.Lock()
			if c.codes == nil {
				c.codes = map[string]int{}
			}
			c.codes[pgErr.Code]++
			c.mu.Unlock()
		}
	}}
}

func (c *claimErrors) count(code string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.codes[code]
}

func (c *claimErrors) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprint(c.codes)
}

// holdOwnershipLock locks, in a transaction of its own on pool (the test's
// own pool, which no setting under test reaches), the row of the table's
// outbox_partitioning that every relay's first rebalance (its join to the
// table's members) updates, and returns the transaction (roll back or
// commit to release): a relay that starts meanwhile waits in its first
// claim.
func holdOwnershipLock(t *testing.T, pool *pgxpool.Pool) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(ctx, "UPDATE outbox_partitioning SET generation = generation + 1"); err != nil {
		t.Fatal(err)
	}
	return tx
}

// claimWaits reports whether a session of db's database waits for a lock
// (the relay's claim, for holdOwnershipLock's).
func claimWaits(t *testing.T, check *pgxpool.Pool) bool {
	t.Helper()
	var n int
	if err := check.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// underLoad runs two relays on db publishing to topic while a writer
// commits events, then checks that every event of the table was published
// to topic once, in order; the claims' errors are recorded in errs.
func underLoad(t *testing.T, db *testenv.TestDB, check *pgxpool.Pool, k *testenv.TestKafka, topic string, errs *claimErrors, fault string) {
	t.Helper()
	for range 2 {
		ipStartRelay(t, db, k.Brokers, topic, ipConfig{
			Relay: relay.Config{PollInterval: 50 * time.Millisecond, RetryMin: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond, Observer: errs.observer()},
		})
	}
	load := ipStartLoad(t, check, writer(t, check), "agg", 20, 3, 2*time.Millisecond)
	testenv.Eventually(t, 60*time.Second, func() bool { return load.Committed.Load() >= 1500 }, "the writer did not commit 1,500 events (last error: %v)", load.LastErr())
	load.Stop()
	testenv.Eventually(t, 60*time.Second, func() bool { return ipUnpublished(t, check) == 0 }, "not everything published")
	checkTopic(t, check, k.Brokers, topic, fault, 30*time.Second)
	t.Logf("%s: %d events committed (%d writer transactions failed), claim errors by SQLSTATE %s", fault, load.Committed.Load(), load.Failed.Load(), errs)
}

// default_transaction_isolation repeatable read or serializable: a claim
// (its rebalance) whose snapshot was taken before it got a row lock fails
// with 40001 (could not serialize access due to concurrent update) when
// the holder changed that row; the relay retries and loses nothing.
func TestInprocIsolationLevelSetOnTheDatabase(t *testing.T) {
	t.Parallel()
	for _, level := range []string{"repeatable read", "serializable"} {
		t.Run(level, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, check := settingsDB(t, map[string]string{"default_transaction_isolation": level})
			ipInsert(t, check, writer(t, check), ipEvent("first", 0))
			lock := holdOwnershipLock(t, check)
			var errs claimErrors
			k := testenv.Kafka(t)
			topic := k.Topic(t, 4)
			h := ipStartRelay(t, db, k.Brokers, topic, ipConfig{
				Relay: relay.Config{PollInterval: 50 * time.Millisecond, RetryMin: 20 * time.Millisecond, Observer: errs.observer()},
			})
			testenv.Eventually(t, 60*time.Second, func() bool { return claimWaits(t, check) }, "no claim waits for the ownership lock")
			// The waiting claim's snapshot is older than the lock holder's
			// change, which it must update too.
			if err := lock.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 60*time.Second, func() bool { return ipUnpublished(t, check) == 0 }, "the event was not published after the serialization failure")
			if errs.count("40001") == 0 {
				t.Fatalf("no claim failed with 40001 (claim errors %s): the test did not exercise the retry", &errs)
			}
			h.Stop()
			underLoad(t, db, check, k, topic, &errs, "default_transaction_isolation "+level)
		})
	}
}

// lock_timeout 5ms or statement_timeout 50ms on the database: a claim
// that waits longer for a row lock than that fails (55P03 or 57014) and is
// retried; under load with two relays (whose rebalances lock the same
// rows) nothing is lost.
func TestInprocTimeoutsSetOnTheDatabase(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ setting, value, code string }{
		{"lock_timeout", "5ms", "55P03"},
		{"statement_timeout", "50ms", "57014"},
	} {
		t.Run(c.setting, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, check := settingsDB(t, map[string]string{c.setting: c.value})
			// The test's own writes and checks go through check, which
			// the setting does not reach: only the relay runs under it.
			ipInsert(t, check, writer(t, check), ipEvent("first", 0))
			lock := holdOwnershipLock(t, check)
			var errs claimErrors
			k := testenv.Kafka(t)
			topic := k.Topic(t, 4)
			h := ipStartRelay(t, db, k.Brokers, topic, ipConfig{
				Relay: relay.Config{PollInterval: 50 * time.Millisecond, RetryMin: 20 * time.Millisecond, Observer: errs.observer()},
			})
			testenv.Eventually(t, 60*time.Second, func() bool { return errs.count(c.code) >= 2 }, "no claim failed twice with %s (claim errors %s)", c.code, &errs)
			if err := lock.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 60*time.Second, func() bool { return ipUnpublished(t, check) == 0 }, "the event was not published once the lock was free")
			h.Stop()
			underLoad(t, db, check, k, topic, &errs, c.setting+" "+c.value)
		})
	}
}
