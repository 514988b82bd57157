package sqladmin_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/sqladmin"
	"github.com/pgoutbox/outbox/internal/testenv"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

// An UNLOGGED partition of a partitioned outbox table is refused like an
// UNLOGGED table: by the durability check (migrate, adopt and the relay
// run it) and by Inspect (status, inspect, the metrics' table check).
func TestUnloggedPartitionIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.DB(t)
	migrateTimePartitioned(t, db, 1)
	if err := sqladmin.CheckDurability(ctx, db.Pool, "outbox"); err != nil {
		t.Fatalf("logged partitions: %v", err)
	}
	r, err := sqladmin.Inspect(ctx, db.Pool, "outbox")
	if err != nil || !r.Partitioned || r.Partitions != 3 || len(r.Problems()) != 0 || r.Sequence == "" {
		t.Fatalf("inspect: %+v %v, want partitioned, 3 partitions, a sequence, no problem", r, err)
	}
	if _, err := db.Pool.Exec(ctx, `CREATE UNLOGGED TABLE outbox_fast PARTITION OF outbox FOR VALUES FROM ('2001-01-01') TO ('2001-01-02')`); err != nil {
		t.Fatal(err)
	}
	err = sqladmin.CheckDurability(ctx, db.Pool, "outbox")
	var ue *sqladmin.UnloggedError
	if !errors.As(err, &ue) || ue.Partition != "outbox_fast" || !strings.Contains(err.Error(), "ALTER TABLE outbox_fast SET LOGGED") {
		t.Fatalf("unlogged partition: %v, want an *UnloggedError naming outbox_fast", err)
	}
	if _, err := outboxsql.Migrate(ctx, db.Pool); !errors.As(err, &ue) {
		t.Fatalf("migrate: %v, want refused", err)
	}
	r, err = sqladmin.Inspect(ctx, db.Pool, "outbox")
	if err != nil || r.UnloggedPartition != "outbox_fast" || len(r.Problems()) != 1 {
		t.Fatalf("inspect: %+v %v, want the unlogged partition as a problem", r, err)
	}
}

// On a partitioned table, a relay that keeps its time partitions must
// own it (ATTACH PARTITION, DROP TABLE) and may create tables in its
// schema: the privilege check names both for a role that is neither; on
// a plain table neither is asked.
func TestPrivilegesOfTimePartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.DB(t)
	migrateTimePartitioned(t, db, 1)
	role, url := db.Role(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "SET search_path = "+db.Schema); err != nil {
		t.Fatal(err)
	}
	table := db.Schema + ".outbox"
	_, missing, err := sqladmin.MissingPrivileges(ctx, pool, table, sqladmin.Needs{TimePartitions: true})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range missing {
		if strings.Contains(p.For, "time partitions") {
			got = append(got, p.Privilege+" "+p.On)
		}
	}
	if len(got) != 2 || !strings.HasPrefix(got[0], "MEMBER ROLE ") || !strings.HasPrefix(got[1], "CREATE SCHEMA") {
		t.Fatalf("role %s lacks %v for time partitions, want membership in the owner and CREATE on the schema (all: %v)", role, got, missing)
	}
	if _, missing, err := sqladmin.MissingPrivileges(ctx, db.Pool, "outbox", sqladmin.Needs{TimePartitions: true}); err != nil || len(missing) != 0 {
		t.Fatalf("the owner lacks %v (%v), want nothing", missing, err)
	}
}
