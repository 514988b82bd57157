package sql_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"

	"github.com/pgoutbox/outbox/internal/testenv"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// checkConstraints returns the table's CHECK constraints: name to
// definition (pg_get_constraintdef, NOT VALID included).
func checkConstraints(t *testing.T, pool *pgxpool.Pool, table string) map[string]string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT conname::text, pg_get_constraintdef(oid) FROM pg_constraint
WHERE conrelid = $1::regclass AND contype = 'c'`, table)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	var name, def string
	if _, err := pgx.ForEachRow(rows, []any{&name, &def}, func() error { out[name] = def; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// wantCheckViolation fails t unless err is a check_violation (SQLSTATE
// 23514) of constraint.
func wantCheckViolation(t *testing.T, what string, err error, constraint string) {
	t.Helper()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "23514" || pe.ConstraintName != constraint {
		t.Errorf("%s: err = %v, want a check violation of %s", what, err, constraint)
	}
}

// A live table with rows that break the new rules, written before
// migration 00007: the migration succeeds and keeps them, the relay's
// updates of them (claim, mark) still work, new rows that break a rule are
// refused, inserted or updated; down and up again work too.
func TestMigrationChecksNewRowsAndKeepsOldOnes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.DB(t)
	sqlDB := stdlib.OpenDBFromPool(db.Pool)
	defer sqlDB.Close()
	store, err := database.NewStore(database.DialectPostgres, outboxsql.VersionTable)
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider("", sqlDB, outboxsql.Migrations(), goose.WithStore(store), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 6); err != nil {
		t.Fatal(err)
	}
	// Rows a plain-SQL writer could store until now.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload, headers, topic) VALUES
  (gen_random_uuid(), '', 't', '{}', NULL, NULL),
  (gen_random_uuid(), repeat('x', 2000), 't', '{}', NULL, NULL),
  (gen_random_uuid(), 'old', '', '{}', NULL, NULL),
  (gen_random_uuid(), 'old', 't', '{}', '{"n": 1, "event_id": "x"}', NULL),
  (gen_random_uuid(), 'old', 't', '{}', '[1, "two"]', NULL),
  (gen_random_uuid(), 'old', 't', '{}', NULL, 'no spaces')`); err != nil {
		t.Fatal(err)
	}
	res, err := outboxsql.Migrate(ctx, db.Pool)
	if err != nil {
		t.Fatalf("migrate over rows that break the rules: %v", err)
	}
	if len(res) != 1 || res[0].Version != 7 {
		t.Fatalf("applied %+v, want migration 7 only", res)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&n); err != nil || n != 6 {
		t.Fatalf("%d rows after the migration (err %v), want the 6 old ones", n, err)
	}
	defs := checkConstraints(t, db.Pool, "outbox")
	for _, name := range []string{"outbox_aggregate_id_check", "outbox_event_type_check", "outbox_headers_check", "outbox_topic_check"} {
		if def := defs[name]; !strings.HasPrefix(def, "CHECK (((seq <= 6) OR ") || !strings.HasSuffix(def, "NOT VALID") {
			t.Errorf("%s: %q, want a NOT VALID check exempting seq <= 6", name, def)
		}
		t.Logf("%s %s", name, defs[name])
	}
	// The relay claims and marks the old rows: UPDATEs of rows that break
	// the rules, which PostgreSQL checks like any new row version.
	if tag, err := db.Pool.Exec(ctx, `UPDATE outbox SET locked_until = now() + interval '30 seconds', locked_by = 'relay', claim_token = gen_random_uuid()`); err != nil || tag.RowsAffected() != 6 {
		t.Fatalf("claiming the old rows: %v (%d rows)", err, tag.RowsAffected())
	}
	if tag, err := db.Pool.Exec(ctx, `UPDATE outbox SET published_at = now(), locked_until = NULL`); err != nil || tag.RowsAffected() != 6 {
		t.Fatalf("marking the old rows: %v (%d rows)", err, tag.RowsAffected())
	}
	for _, c := range []struct{ set, constraint string }{
		{`aggregate_id = ''`, "outbox_aggregate_id_check"},
		{`aggregate_id = repeat('é', 513)`, "outbox_aggregate_id_check"}, // 1026 bytes
		{`event_type = ''`, "outbox_event_type_check"},
		{`headers = '{"a": 1}'`, "outbox_headers_check"},
		{`headers = '[]'`, "outbox_headers_check"},
		{`topic = '..'`, "outbox_topic_check"},
	} {
		var seq int64
		if err := db.Pool.QueryRow(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload) VALUES (gen_random_uuid(), 'new', 't', '{}') RETURNING seq`).Scan(&seq); err != nil {
			t.Fatal(err)
		}
		_, err := db.Pool.Exec(ctx, `UPDATE outbox SET `+c.set+` WHERE seq = $1`, seq)
		wantCheckViolation(t, "UPDATE SET "+c.set, err, c.constraint)
		_, err = db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload) VALUES (gen_random_uuid(), 'new', 't', '{}')`)
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err = db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload) VALUES (gen_random_uuid(), '', 't', '{}')`)
	wantCheckViolation(t, "INSERT of an empty aggregate_id", err, "outbox_aggregate_id_check")

	if _, err := p.DownTo(ctx, 6); err != nil {
		t.Fatalf("down: %v", err)
	}
	if defs := checkConstraints(t, db.Pool, "outbox"); len(defs) != 0 {
		t.Fatalf("after down: %v", defs)
	}
	if _, err := outboxsql.Migrate(ctx, db.Pool); err != nil {
		t.Fatalf("up again: %v", err)
	}
}

// A new installation gets the plain rules, valid.
func TestMigrationOnAnEmptyTableAddsValidChecks(t *testing.T) {
	t.Parallel()
	db := testenv.MigratedDB(t)
	want := map[string]string{
		"outbox_aggregate_id_check": `CHECK (((aggregate_id <> ''::text) AND (octet_length(aggregate_id) <= 1024)))`,
		"outbox_event_type_check":   `CHECK ((event_type <> ''::text))`,
		"outbox_headers_check": `CHECK (((headers IS NULL) OR ((jsonb_typeof(headers) = 'object'::text) AND (NOT jsonb_path_exists(headers, 'strict $.*?(@.type() != "string")'::jsonpath)) AND ` +
			`(NOT (headers ?| ARRAY[''::text, 'event_id'::text, 'event_type'::text, 'aggregate_id'::text])))))`,
		"outbox_topic_check": `CHECK (((topic IS NULL) OR ((topic ~ '^[a-zA-Z0-9._-]+$'::text) AND (octet_length(topic) <= 249) AND (topic <> ALL (ARRAY['.'::text, '..'::text])))))`,
	}
	got := checkConstraints(t, db.Pool, "outbox")
	for name, def := range want {
		if got[name] != def {
			t.Errorf("%s:\n got %s\nwant %s", name, got[name], def)
		}
	}
	if len(got) != len(want) {
		t.Errorf("constraints %v, want %d", got, len(want))
	}
}

// debeziumTable creates an outbox table as Debezium's Outbox Event Router
// documents it.
func debeziumTable(t *testing.T, pool *pgxpool.Pool, name string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `CREATE TABLE `+pgx.Identifier{name}.Sanitize()+` (
  id uuid NOT NULL PRIMARY KEY,
  aggregatetype varchar(255) NOT NULL,
  aggregateid varchar(255) NOT NULL,
  type varchar(255) NOT NULL,
  payload jsonb
)`); err != nil {
		t.Fatal(err)
	}
}

// Adopting a Debezium table that holds rows breaking the rules keeps them
// (and the relay can still claim and mark them), adds the four constraints
// on the mapped columns under <table>_..._check, and refuses a producer's
// new row that breaks one. Adopting twice changes nothing.
func TestAdoptChecksNewRowsOnMappedColumns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.DB(t)
	debeziumTable(t, db.Pool, "outboxevent")
	// varchar(255) counts characters, at most 1020 bytes of UTF-8: under
	// the limit. A wider column lets an old row be over it.
	if _, err := db.Pool.Exec(ctx, `ALTER TABLE outboxevent ALTER COLUMN aggregateid TYPE varchar(2000)`); err != nil {
		t.Fatal(err)
	}
	insert := `INSERT INTO outboxevent (id, aggregatetype, aggregateid, type, payload) VALUES (gen_random_uuid(), 'Order', $1, $2, '{}')`
	for _, r := range [][2]string{{"", "OrderCreated"}, {"o-1", ""}, {strings.Repeat("€", 400), "OrderCreated"}} {
		if _, err := db.Pool.Exec(ctx, insert, r[0], r[1]); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 2; i++ {
		if err := outboxsql.Adopt(ctx, db.Pool, "outboxevent", "aggregateid"); err != nil {
			t.Fatalf("adopt #%d: %v", i+1, err)
		}
	}
	defs := checkConstraints(t, db.Pool, "outboxevent")
	for _, name := range []string{"outboxevent_aggregate_id_check", "outboxevent_event_type_check", "outboxevent_headers_check", "outboxevent_topic_check"} {
		if def := defs[name]; !strings.HasPrefix(def, "CHECK (((seq <= 3) OR ") || !strings.HasSuffix(def, "NOT VALID") {
			t.Errorf("%s: %q, want a NOT VALID check exempting seq <= 3", name, def)
		}
		t.Logf("%s %s", name, defs[name])
	}
	if len(defs) != 4 {
		t.Errorf("constraints after adopting twice: %v", defs)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM outboxevent`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("%d rows after adopt (err %v), want the 3 old ones", n, err)
	}
	if tag, err := db.Pool.Exec(ctx, `UPDATE outboxevent SET locked_until = now() + interval '30 seconds', locked_by = 'relay', claim_token = gen_random_uuid()`); err != nil || tag.RowsAffected() != 3 {
		t.Fatalf("claiming the old rows: %v (%d rows)", err, tag.RowsAffected())
	}
	if tag, err := db.Pool.Exec(ctx, `UPDATE outboxevent SET published_at = now()`); err != nil || tag.RowsAffected() != 3 {
		t.Fatalf("marking the old rows: %v (%d rows)", err, tag.RowsAffected())
	}
	// The producers' own INSERTs.
	_, err := db.Pool.Exec(ctx, insert, "", "OrderCreated")
	wantCheckViolation(t, "empty aggregateid", err, "outboxevent_aggregate_id_check")
	_, err = db.Pool.Exec(ctx, insert, strings.Repeat("€", 342), "OrderCreated") // 1026 bytes
	wantCheckViolation(t, "1026-byte aggregateid", err, "outboxevent_aggregate_id_check")
	_, err = db.Pool.Exec(ctx, insert, "o-2", "")
	wantCheckViolation(t, "empty type", err, "outboxevent_event_type_check")
	_, err = db.Pool.Exec(ctx, `INSERT INTO outboxevent (id, aggregatetype, aggregateid, type, payload, headers) VALUES (gen_random_uuid(), 'Order', 'o-3', 'OrderCreated', '{}', '{"n": 1}')`)
	wantCheckViolation(t, "headers with a number", err, "outboxevent_headers_check")
	_, err = db.Pool.Exec(ctx, `INSERT INTO outboxevent (id, aggregatetype, aggregateid, type, payload, topic) VALUES (gen_random_uuid(), 'Order', 'o-3', 'OrderCreated', '{}', 'a b')`)
	wantCheckViolation(t, "illegal topic", err, "outboxevent_topic_check")
	if _, err := db.Pool.Exec(ctx, insert, strings.Repeat("€", 341)+"a", "OrderCreated"); err != nil { // 1024 bytes
		t.Fatalf("a good row: %v", err)
	}
}

// AdoptTable with pgoutbox's column names adds exactly the migration's
// constraints; on a table that never had a row, valid ones. Adopt finds
// the event type column by name (none: no event type check), and shortens
// constraint names of a long table name, keeping the suffix.
func TestAdoptAddsTheMigrationsConstraints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	migrated := checkConstraints(t, db.Pool, "outbox")
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE events (id uuid PRIMARY KEY, aggregate_id text NOT NULL, event_type text NOT NULL, payload jsonb)`); err != nil {
		t.Fatal(err)
	}
	if err := outboxsql.AdoptTable(ctx, db.Pool, db.Schema+".events", outboxsql.AdoptColumns{}); err != nil {
		t.Fatal(err)
	}
	adopted := checkConstraints(t, db.Pool, "events")
	for name, def := range migrated {
		if got := adopted["events"+strings.TrimPrefix(name, "outbox")]; got != def {
			t.Errorf("%s:\n adopted  %s\nmigrated %s", name, got, def)
		}
	}
	if len(adopted) != len(migrated) {
		t.Errorf("adopted %v, migrated %v", adopted, migrated)
	}

	long := strings.Repeat("ü", 28) + "_events" // 63 bytes
	debeziumTable(t, db.Pool, long)
	for i := 0; i < 2; i++ {
		if err := outboxsql.Adopt(ctx, db.Pool, long, "aggregateid"); err != nil {
			t.Fatalf("adopt #%d %s: %v", i+1, long, err)
		}
	}
	defs := checkConstraints(t, db.Pool, pgx.Identifier{long}.Sanitize())
	var names []string
	for name := range defs {
		names = append(names, name)
		if len(name) > 63 || !strings.HasPrefix(name, strings.Repeat("ü", 21)) {
			t.Errorf("constraint name %q", name)
		}
	}
	if len(defs) != 4 || !strings.Contains(defs[strings.Repeat("ü", 23)+"_event_type_check"], `(type)::text <> ''::text`) {
		t.Errorf("constraints of %s: %v", long, defs)
	}
	t.Logf("names for a 63-byte table name: %v", names)

	// No event type column that Adopt knows: no event type check.
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE other (id uuid PRIMARY KEY, aggregate_id text NOT NULL, kind text NOT NULL, payload jsonb)`); err != nil {
		t.Fatal(err)
	}
	if err := outboxsql.Adopt(ctx, db.Pool, "other", ""); err != nil {
		t.Fatal(err)
	}
	if defs := checkConstraints(t, db.Pool, "other"); len(defs) != 3 || defs["other_event_type_check"] != "" || defs["other_aggregate_id_check"] == "" {
		t.Errorf("constraints of a table without event_type or type: %v", defs)
	}
}
