package sql_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testenv"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

// The key partition of an aggregate ID is the same from Go
// (outbox.KeyPartition), from the SQL function the migration installs and
// from the insert trigger, for ASCII, multi-byte and long IDs and for any
// partition count.
func TestKeyPartitionIsTheSameInGoAndSQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	ids := []string{"a", "pay_123", "Bestellung-ü-€-日本", strings.Repeat("x", 1024), "tab\tand\nnewline", "'quote\"", "0"}
	for range 200 {
		var b strings.Builder
		for range 1 + rng.IntN(40) {
			b.WriteRune(rune(32 + rng.IntN(0x2fff)))
		}
		ids = append(ids, b.String())
	}
	for _, parts := range []int{256, 7, 1} {
		t.Run(fmt.Sprint(parts), func(t *testing.T) {
			db := testenv.DB(t)
			if _, err := outboxsql.MigrateWith(ctx, db.Pool, outboxsql.MigrateOptions{Partitions: parts}); err != nil {
				t.Fatal(err)
			}
			for _, id := range ids {
				var fromFn, fromTrigger int
				if err := db.Pool.QueryRow(ctx, `WITH ins AS (
  INSERT INTO outbox (id, aggregate_id, event_type, payload) VALUES (gen_random_uuid(), $1, 't', '{}') RETURNING key_partition
) SELECT outbox_key_partition($1), (SELECT key_partition FROM ins)`, id).Scan(&fromFn, &fromTrigger); err != nil {
					t.Fatalf("%q: %v", id, err)
				}
				if want := outbox.KeyPartition(id, parts); fromFn != want || fromTrigger != want {
					t.Fatalf("%q, %d partitions: Go %d, SQL function %d, trigger %d", id, parts, want, fromFn, fromTrigger)
				}
			}
		})
	}
}

// A table migrated before key partitions, with unpublished rows: migrate
// fills their key partitions in (in batches), records that it did, and a
// different partition count afterwards is refused.
func TestMigrateFillsInTheKeyPartitionsOfOldRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.DB(t)
	if _, err := migrations(t, db.Pool).UpTo(ctx, 8); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload, published_at)
SELECT gen_random_uuid(), 'agg-' || (i % 37), 't', '{}', CASE WHEN i % 10 = 0 THEN now() END FROM generate_series(1, 2500) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := outboxsql.Migrate(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	var missing, wrong int
	var done bool
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE key_partition IS NULL AND published_at IS NULL),
  count(*) FILTER (WHERE key_partition IS DISTINCT FROM outbox_key_partition(aggregate_id) AND published_at IS NULL),
  (SELECT backfilled_at IS NOT NULL FROM outbox_partitioning) FROM outbox`).Scan(&missing, &wrong, &done); err != nil {
		t.Fatal(err)
	}
	if missing != 0 || wrong != 0 || !done {
		t.Fatalf("after migrate: %d unpublished rows without a key partition, %d with a wrong one, backfill recorded %v", missing, wrong, done)
	}
	if _, err := outboxsql.MigrateWith(ctx, db.Pool, outboxsql.MigrateOptions{Partitions: 64}); err == nil || !strings.Contains(err.Error(), "has 256 key partitions") {
		t.Fatalf("migrate --partitions 64 on a table of 256: %v, want it refused", err)
	}
}
