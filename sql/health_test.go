package sql_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/pgoutbox/outbox/internal/testenv"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

// An UNLOGGED outbox table is emptied by a crash or an immediate shutdown
// (issue 20: 2,054 rows gone, 1,000 of them unpublished, and migrate said
// "schema is up to date"). Migrate and Adopt refuse it, and an unlogged
// sequence, naming the table and the ALTER ... SET LOGGED fix, and change
// nothing.
func TestMigrateAndAdoptRefuseAnUnloggedTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	exec := func(sql string) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec("ALTER TABLE outbox SET UNLOGGED")
	_, err := outboxsql.Migrate(ctx, db.Pool)
	var ue *outboxsql.UnloggedError
	if !errors.As(err, &ue) || ue.Table != "outbox" || !strings.Contains(err.Error(), "ALTER TABLE outbox SET LOGGED") {
		t.Fatalf("Migrate on an unlogged table: %v; want an *UnloggedError naming outbox and ALTER TABLE outbox SET LOGGED", err)
	}
	t.Log(err)
	exec("ALTER TABLE outbox SET LOGGED")
	if _, err := outboxsql.Migrate(ctx, db.Pool); err != nil {
		t.Fatalf("Migrate once logged: %v", err)
	}
	exec("ALTER SEQUENCE outbox_seq_seq SET UNLOGGED")
	_, err = outboxsql.Migrate(ctx, db.Pool)
	if !errors.As(err, &ue) || !strings.Contains(ue.Sequence, "outbox_seq_seq") || !strings.Contains(err.Error(), "ALTER SEQUENCE "+ue.Sequence+" SET LOGGED") {
		t.Fatalf("Migrate with an unlogged sequence: %v; want an *UnloggedError naming the sequence and its fix", err)
	}
	t.Log(err)

	debeziumTable(t, db.Pool, "outboxevent")
	exec("ALTER TABLE outboxevent SET UNLOGGED")
	err = outboxsql.Adopt(ctx, db.Pool, "outboxevent", "aggregateid")
	if !errors.As(err, &ue) || ue.Table != "outboxevent" || !strings.Contains(err.Error(), "ALTER TABLE outboxevent SET LOGGED") {
		t.Fatalf("Adopt of an unlogged table: %v", err)
	}
	var cols int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'outboxevent'", db.Schema).Scan(&cols); err != nil || cols != 5 {
		t.Fatalf("the refused table has %d columns (%v), want its 5", cols, err)
	}
}

// A publication that publishes UPDATEs of a table without a usable
// replica identity (no primary key, REPLICA IDENTITY DEFAULT) makes every
// UPDATE of it fail with SQLSTATE 55000, the relay's claims and marks
// included: Adopt refuses such a table, naming the publication and the
// fixes, and adopts it once it has a replica identity.
func TestAdoptRefusesATableItsUpdatesWouldFailOn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.DB(t)
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE outboxevent (id uuid NOT NULL, aggregatetype text, aggregateid text NOT NULL, type text NOT NULL, payload jsonb)`); err != nil {
		t.Fatal(err)
	}
	pub := db.Schema + "_pub"
	if _, err := db.Pool.Exec(ctx, "CREATE PUBLICATION "+pub+" FOR TABLE outboxevent"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Pool.Exec(context.Background(), "DROP PUBLICATION IF EXISTS "+pub) })
	err := outboxsql.Adopt(ctx, db.Pool, "outboxevent", "aggregateid")
	var re *outboxsql.ReplicaIdentityError
	if !errors.As(err, &re) || len(re.Publications) != 1 || re.Publications[0] != pub {
		t.Fatalf("Adopt: %v; want a *ReplicaIdentityError naming publication %s", err, pub)
	}
	for _, fix := range []string{"ALTER TABLE outboxevent REPLICA IDENTITY FULL", "PRIMARY KEY", "DROP PUBLICATION " + pub, "ALTER PUBLICATION " + pub + " SET (publish = 'insert')"} {
		if !strings.Contains(err.Error(), fix) {
			t.Errorf("the error does not name the fix %q: %v", fix, err)
		}
	}
	t.Log(err)
	// What the refusal spares the relay.
	if _, err := db.Pool.Exec(ctx, "INSERT INTO outboxevent VALUES (gen_random_uuid(), 'Order', 'o-1', 'Created', '{}')"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, "UPDATE outboxevent SET type = type"); err == nil || !strings.Contains(err.Error(), "55000") {
		t.Fatalf("UPDATE without a replica identity: %v; want SQLSTATE 55000", err)
	}
	if _, err := db.Pool.Exec(ctx, "ALTER TABLE outboxevent REPLICA IDENTITY FULL"); err != nil {
		t.Fatal(err)
	}
	if err := outboxsql.Adopt(ctx, db.Pool, "outboxevent", "aggregateid"); err != nil {
		t.Fatalf("Adopt with REPLICA IDENTITY FULL: %v", err)
	}
}

// Rows already in an adopted table are numbered in the order they were
// written, not in the order they lie on disk: after a delete and VACUUM
// (a Debezium table's producers delete their rows), new rows fill the
// freed space before older ones, and adding seq numbered them first, so
// the relay published an aggregate's events out of order (a tester's
// case: n=2, n=3, n=1). A second adopt changes nothing, and new rows come
// after.
func TestAdoptNumbersRowsInTheOrderTheyWereWritten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.DB(t)
	exec := func(sql string) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	add := func(n int) string {
		return fmt.Sprintf(`INSERT INTO ev (id, aggregate_id, event_type, payload) VALUES (gen_random_uuid(), 'x', 't', '{"n": %d}')`, n)
	}
	exec(`CREATE TABLE ev (id uuid PRIMARY KEY, aggregate_id text NOT NULL, event_type text NOT NULL, payload jsonb)`)
	// The transaction of n=1 takes its ID first and writes its row last,
	// so the row lies on disk after those of n=2 and n=3, as after a
	// delete and VACUUM (which cannot be relied on with other tests'
	// snapshots open).
	first, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = first.Rollback(ctx) }()
	if _, err := first.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil {
		t.Fatal(err)
	}
	exec(add(2))
	exec(add(3))
	if _, err := first.Exec(ctx, add(1)); err != nil {
		t.Fatal(err)
	}
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	exec(add(4) + "; " + add(5)) // one transaction, two statements
	order := func() string {
		t.Helper()
		var got string
		if err := db.Pool.QueryRow(ctx, `SELECT string_agg(payload->>'n', ',' ORDER BY seq) FROM ev`).Scan(&got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	var onDisk string
	if err := db.Pool.QueryRow(ctx, `SELECT string_agg(payload->>'n', ',' ORDER BY ctid) FROM ev`).Scan(&onDisk); err != nil {
		t.Fatal(err)
	}
	if onDisk == "1,2,3,4,5" {
		t.Fatalf("the rows lie on disk in the order they were written (%s): the test proves nothing", onDisk)
	}
	for i := 0; i < 2; i++ {
		if err := outboxsql.Adopt(ctx, db.Pool, "ev", ""); err != nil {
			t.Fatal(err)
		}
		if got := order(); got != "1,2,3,4,5" {
			t.Fatalf("adopt %d: seq order %s, want 1,2,3,4,5 (on disk: %s)", i+1, got, onDisk)
		}
	}
	exec(add(6))
	if got := order(); got != "1,2,3,4,5,6" {
		t.Fatalf("after a new row: seq order %s, want 1,2,3,4,5,6", got)
	}
}
