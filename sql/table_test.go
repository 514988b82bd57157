package sql_test

import (
	"context"
	"errors"
	"testing"

	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/lease"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

// migrate --table NAME creates and upgrades a table of that name, also
// schema-qualified, with its own indexes, constraints, order guard and
// migration history; the relay's claimer works on it. A missing schema
// says so.
func TestMigrateTableOfAnotherName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.DB(t)
	if _, err := db.Pool.Exec(ctx, "CREATE SCHEMA "+db.Schema+"_billing"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Pool.Exec(context.Background(), "DROP SCHEMA "+db.Schema+"_billing CASCADE") })
	for _, table := range []string{"events", db.Schema + "_billing.outbox"} {
		for round := 0; round < 2; round++ { // twice: the second is a no-op
			applied, err := outboxsql.MigrateTable(ctx, db.Pool, table)
			if err != nil {
				t.Fatalf("%s: %v", table, err)
			}
			if round == 1 && len(applied) != 0 {
				t.Fatalf("%s: second run applied %v", table, applied)
			}
		}
		c, err := claim.New(db.Pool, lease.Config{Table: table})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Pool.Exec(ctx, "INSERT INTO "+table+" (id, aggregate_id, event_type, payload) VALUES (gen_random_uuid(), 'a', 't', '{}')"); err != nil {
			t.Fatalf("%s: insert: %v", table, err)
		}
		b, err := c.Claim(ctx)
		if err != nil || len(b.Rows) != 1 {
			t.Fatalf("%s: claim %v %v", table, b, err)
		}
		if _, err := db.Pool.Exec(ctx, "INSERT INTO "+table+" (id, aggregate_id, event_type, payload) VALUES (gen_random_uuid(), '', 't', '{}')"); err == nil {
			t.Fatalf("%s: the aggregate_id check is missing", table)
		}
	}
	var idx int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_indexes WHERE tablename = 'events' AND indexname LIKE 'events\\_%'").Scan(&idx); err != nil || idx < 4 {
		t.Fatalf("indexes named after events: %d %v", idx, err)
	}
	var missing *outboxsql.MissingSchemaError
	if _, err := outboxsql.MigrateTable(ctx, db.Pool, "nosuchschema.outbox"); !errors.As(err, &missing) || missing.Schema != "nosuchschema" {
		t.Fatalf("missing schema: %v", err)
	}
	t.Logf("%v", missing)
}
