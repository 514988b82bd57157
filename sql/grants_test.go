package sql_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/retention"
	"github.com/pgoutbox/outbox/internal/sqladmin"
	"github.com/pgoutbox/outbox/internal/testenv"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

// rolePool connects as a role of db.Role.
func rolePool(t *testing.T, connString string) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), connString)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// The grants script on a time-partitioned table owned by a role of its
// own (issue 29: it lacked what partition maintenance needs): run by a
// superuser, it gives the relay's role everything the start-up check
// asks for, time partitions and retention's included; as that role, the
// coming partitions are created and retention drops an old partition.
func TestGrantScriptOnATimePartitionedTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.DB(t)
	owner, ownerURL := db.Role(t)
	if _, err := db.Pool.Exec(ctx, `GRANT CREATE ON SCHEMA `+pgx.Identifier{db.Schema}.Sanitize()+` TO `+owner); err != nil {
		t.Fatal(err)
	}
	ownerPool := rolePool(t, ownerURL)
	if _, err := outboxsql.MigrateWith(ctx, ownerPool, outboxsql.MigrateOptions{TimePartitioned: true, TimePartitionsAhead: 1}); err != nil {
		t.Fatal(err)
	}
	var now time.Time
	if err := db.Pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	old, err := sqladmin.CreateTimePartitions(ctx, ownerPool, "outbox", now.Add(-3*24*time.Hour), now.Add(-3*24*time.Hour+time.Second))
	if err != nil || len(old) != 1 {
		t.Fatalf("an old partition: %v %v", old, err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, created_at, published_at)
VALUES (gen_random_uuid(), 'a', 't', now() - interval '3 days', now() - interval '3 days')`); err != nil {
		t.Fatal(err)
	}

	relay, relayURL := db.Role(t)
	if _, err := db.Pool.Exec(ctx, outboxsql.GrantScript(relay, "outbox", ""), pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("the grants script: %v\n%s", err, outboxsql.GrantScript(relay, "outbox", ""))
	}
	relayPool := rolePool(t, relayURL)
	_, missing, err := sqladmin.MissingPrivileges(ctx, relayPool, "outbox", outboxsql.Needs{Retention: true, SnapshotWatch: true, TimePartitions: true})
	if err != nil || len(missing) != 0 {
		t.Fatalf("missing privileges after the script: %v %v", missing, err)
	}
	created, err := sqladmin.CreateTimePartitions(ctx, relayPool, "outbox", now, now.Add(4*24*time.Hour))
	if err != nil || len(created) != 3 {
		t.Fatalf("creating partitions as the relay's role: %v %v, want 3", created, err)
	}
	c, err := retention.New(retention.Config{Table: "outbox", Retention: time.Hour, DropPartitions: true}, relayPool, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Clean(ctx)
	if err != nil || len(p.DroppedPartitions) != 1 || !strings.Contains(p.DroppedPartitions[0], old[0]) {
		t.Fatalf("a retention pass as the relay's role: dropped %v, %v; want %s", p.DroppedPartitions, err, old[0])
	}
}

// On a time-partitioned table owned by a superuser, the script says why
// the relay's role cannot get what partition maintenance needs
// (membership in a superuser role lets a role become one) and how to
// give the table an owner of its own.
func TestGrantScriptRefusesASuperuserOwner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.DB(t)
	var super bool
	if err := db.Pool.QueryRow(ctx, `SELECT rolsuper FROM pg_roles WHERE rolname = current_user`).Scan(&super); err != nil || !super {
		t.Skipf("the test database's role is not a superuser (%v)", err)
	}
	migrateTimePartitioned(t, db, 1)
	relay, _ := db.Role(t)
	_, err := db.Pool.Exec(ctx, outboxsql.GrantScript(relay, "outbox", ""), pgx.QueryExecModeSimpleProtocol)
	if err == nil || !strings.Contains(err.Error(), "superuser") || !strings.Contains(err.Error(), "OWNER TO") {
		t.Fatalf("the grants script on a table a superuser owns: %v, want it refused, saying why and the fix", err)
	}
}
