package sql_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

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

// rowCheckTriggers returns the table's triggers that are not internal
// (foreign keys' are), name to pg_get_triggerdef, and the source of the
// function they run ("" if none; two functions fail t). A BEFORE UPDATE row
// trigger fails t: PostgreSQL locks every row an UPDATE touches before it
// looks at such a trigger's column list (trigger.c, ExecBRUpdateTriggers,
// GetTupleForTrigger), a WAL record per row the relay claims or marks.
func rowCheckTriggers(t *testing.T, pool *pgxpool.Pool, table string) (defs map[string]string, src string) {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT tg.tgname::text, pg_get_triggerdef(tg.oid), p.prosrc, tg.tgtype & (1|2|16) = (1|2|16),
  coalesce(array_to_string(p.proconfig, ';'), '')
FROM pg_trigger tg JOIN pg_proc p ON p.oid = tg.tgfoid
WHERE tg.tgrelid = $1::regclass AND NOT tg.tgisinternal AND tg.tgname::text NOT LIKE '%key_partition_fill'`, table)
	if err != nil {
		t.Fatal(err)
	}
	defs = map[string]string{}
	var name, def, fsrc, config string
	var beforeUpdate bool
	if _, err := pgx.ForEachRow(rows, []any{&name, &def, &fsrc, &beforeUpdate, &config}, func() error {
		// Else a writer's search_path could shadow what the body calls.
		if config != "search_path=pg_catalog, pg_temp" {
			t.Errorf("%s: the function of trigger %s runs with %q, want search_path=pg_catalog, pg_temp", table, name, config)
		}
		defs[name] = def
		if src != "" && fsrc != src {
			t.Errorf("%s: the triggers run two functions", table)
		}
		src = fsrc
		if beforeUpdate {
			t.Errorf("%s: a BEFORE UPDATE row trigger (it locks every row the relay updates): %s", table, def)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return defs, src
}

// wantRowCheckTriggers fails t unless defs are the two row-check triggers of
// table, the update one on the columns on.
func wantRowCheckTriggers(t *testing.T, defs map[string]string, table, fn, on string) {
	t.Helper()
	ins, upd := defs[table+"_row_checks"], defs[table+"_row_checks_on_update"]
	if !strings.Contains(ins, " BEFORE INSERT ON ") || !strings.Contains(ins, "FOR EACH ROW EXECUTE FUNCTION ") || !strings.HasSuffix(ins, fn+"()") ||
		!strings.Contains(upd, " AFTER UPDATE OF "+on+" ON ") || !strings.HasSuffix(upd, fn+"()") || len(defs) != 2 {
		t.Errorf("triggers of %s: %v", table, defs)
	}
}

// wantCheckViolation fails t unless err is a check_violation (SQLSTATE
// 23514) of constraint, with PostgreSQL's message for a CHECK constraint
// and a DETAIL.
func wantCheckViolation(t *testing.T, what string, err error, constraint string) {
	t.Helper()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "23514" || pe.ConstraintName != constraint {
		t.Errorf("%s: err = %v, want a check violation of %s", what, err, constraint)
		return
	}
	if want := `violates check constraint "` + constraint + `"`; !strings.Contains(pe.Message, want) || pe.Detail == "" || pe.TableName == "" {
		t.Errorf("%s: message %q, detail %q, table %q: want %q, a detail and the table", what, pe.Message, pe.Detail, pe.TableName, want)
	}
}

// migrations returns a goose provider of the outbox migrations on pool, to
// move the table to a given version; its connection closes when t ends.
func migrations(t *testing.T, pool *pgxpool.Pool) *goose.Provider {
	t.Helper()
	sqlDB := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = sqlDB.Close() })
	store, err := database.NewStore(database.DialectPostgres, outboxsql.VersionTable)
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider("", sqlDB, outboxsql.Migrations(), goose.WithStore(store), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// checkFunctionCalls runs stmt in a transaction with function call counting
// on and returns how many times it ran table's row-check function.
func checkFunctionCalls(t *testing.T, pool *pgxpool.Pool, table, stmt string) int64 {
	t.Helper()
	ctx := context.Background()
	var calls int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL track_functions = 'pl'`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_xact_user_functions WHERE funcname = $1`, table+"_check_row").Scan(&calls)
	})
	if err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
	return calls
}

// A live table with rows that break the rules, written before migrations
// 00007 and 00008: they succeed and keep them, the relay's updates of them
// (claim, mark) still work and never run the checks, new rows that break a
// rule are refused, inserted or updated; down to 00007 (its CHECK
// constraints, exempting the rows so far) and to 00006, and up again, work
// too.
func TestMigrationChecksNewRowsAndKeepsOldOnes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.DB(t)
	p := migrations(t, db.Pool)
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
	if len(res) != 5 || res[0].Version != 7 || res[4].Version != 11 {
		t.Fatalf("applied %+v, want migrations 7 to 11", res)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&n); err != nil || n != 6 {
		t.Fatalf("%d rows after the migration (err %v), want the 6 old ones", n, err)
	}
	if defs := checkConstraints(t, db.Pool, "outbox"); len(defs) != 0 {
		t.Errorf("CHECK constraints after 00008: %v, want none (the trigger replaces them)", defs)
	}
	defs, _ := rowCheckTriggers(t, db.Pool, "outbox")
	wantRowCheckTriggers(t, defs, "outbox", "outbox_check_row", "aggregate_id, event_type, headers, topic")
	// The relay claims and marks the old rows: UPDATEs that name no
	// checked column run no check.
	for _, stmt := range []string{
		`UPDATE outbox SET locked_until = now() + interval '30 seconds', locked_by = 'relay', claim_token = gen_random_uuid()`,
		`UPDATE outbox SET published_at = now(), locked_until = NULL, last_error = NULL`,
		`UPDATE outbox SET locked_until = NULL, locked_by = NULL, claim_token = NULL, attempts = attempts + 1, last_error = 'x', dead_lettered_at = now()`,
	} {
		if calls := checkFunctionCalls(t, db.Pool, "outbox", stmt); calls != 0 {
			t.Errorf("%s ran the row checks %d times, want 0", stmt, calls)
		}
	}
	if calls := checkFunctionCalls(t, db.Pool, "outbox", `INSERT INTO outbox (id, aggregate_id, event_type, payload) SELECT gen_random_uuid(), 'new', 't', '{}' FROM generate_series(1, 3)`); calls != 3 {
		t.Errorf("a 3-row INSERT ran the row checks %d times, want 3", calls)
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
	}
	_, err = db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload) VALUES (gen_random_uuid(), '', 't', '{}')`)
	wantCheckViolation(t, "INSERT of an empty aggregate_id", err, "outbox_aggregate_id_check")

	if _, err := p.DownTo(ctx, 7); err != nil {
		t.Fatalf("down to 7: %v", err)
	}
	if defs, _ := rowCheckTriggers(t, db.Pool, "outbox"); len(defs) != 0 {
		t.Errorf("triggers after down to 7: %v", defs)
	}
	var last int64
	// The last seq handed out (a refused INSERT took one too).
	if err := db.Pool.QueryRow(ctx, `SELECT pg_sequence_last_value(pg_get_serial_sequence('outbox', 'seq')::regclass)`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	defs = checkConstraints(t, db.Pool, "outbox")
	for _, name := range []string{"outbox_aggregate_id_check", "outbox_event_type_check", "outbox_headers_check", "outbox_topic_check"} {
		if def := defs[name]; !strings.HasPrefix(def, fmt.Sprintf("CHECK (((seq <= %d) OR ", last)) || !strings.HasSuffix(def, "NOT VALID") {
			t.Errorf("%s after down to 7: %q, want a NOT VALID check exempting seq <= %d", name, def, last)
		}
	}
	if _, err := p.DownTo(ctx, 6); err != nil {
		t.Fatalf("down to 6: %v", err)
	}
	if defs := checkConstraints(t, db.Pool, "outbox"); len(defs) != 0 {
		t.Fatalf("after down to 6: %v", defs)
	}
	if _, err := outboxsql.Migrate(ctx, db.Pool); err != nil {
		t.Fatalf("up again: %v", err)
	}
	if defs := checkConstraints(t, db.Pool, "outbox"); len(defs) != 0 {
		t.Errorf("CHECK constraints after up again: %v", defs)
	}
}

// A new installation gets the trigger and no CHECK constraint; each rule's
// error names its constraint, as a CHECK constraint's would.
func TestMigrationAddsTheRowCheckTrigger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	if defs := checkConstraints(t, db.Pool, "outbox"); len(defs) != 0 {
		t.Errorf("CHECK constraints %v, want none", defs)
	}
	defs, src := rowCheckTriggers(t, db.Pool, "outbox")
	wantRowCheckTriggers(t, defs, "outbox", "outbox_check_row", "aggregate_id, event_type, headers, topic")
	for _, name := range []string{"outbox_aggregate_id_check", "outbox_event_type_check", "outbox_headers_check", "outbox_topic_check"} {
		if !strings.Contains(src, "CONSTRAINT = '"+name+"'") {
			t.Errorf("the function raises no %s:\n%s", name, src)
		}
	}
	insert := `INSERT INTO outbox (id, aggregate_id, event_type, payload, headers, topic) VALUES (gen_random_uuid(), $1, $2, '{}', $3::jsonb, $4)`
	for _, c := range []struct {
		agg, typ   string
		headers    any
		topic      any
		constraint string
	}{
		{"", "t", nil, nil, "outbox_aggregate_id_check"},
		{strings.Repeat("é", 513), "t", nil, nil, "outbox_aggregate_id_check"},
		{"a", "", nil, nil, "outbox_event_type_check"},
		{"a", "t", `{"a": 1}`, nil, "outbox_headers_check"},
		{"a", "t", `{"event_id": "x"}`, nil, "outbox_headers_check"},
		{"a", "t", `"str"`, nil, "outbox_headers_check"},
		{"a", "t", nil, "a b", "outbox_topic_check"},
		{"a", "t", nil, strings.Repeat("t", 250), "outbox_topic_check"},
	} {
		_, err := db.Pool.Exec(ctx, insert, c.agg, c.typ, c.headers, c.topic)
		wantCheckViolation(t, fmt.Sprintf("%.20q %q %v %.20v", c.agg, c.typ, c.headers, c.topic), err, c.constraint)
	}
	if _, err := db.Pool.Exec(ctx, insert, strings.Repeat("é", 512), "t", `{"a": "b"}`, strings.Repeat("t", 249)); err != nil {
		t.Errorf("a good row: %v", err)
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
// (and the relay can still claim and mark them, running no check), adds the
// row checks on the mapped columns named <table>_..._check, drops a CHECK
// constraint of one of those names that an earlier adopt added, and
// refuses a producer's new row that breaks a rule. Adopting twice changes
// nothing.
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
	// What an earlier adopt added (migration 00007's rule, exempting old rows).
	if _, err := db.Pool.Exec(ctx, `ALTER TABLE outboxevent ADD CONSTRAINT outboxevent_event_type_check CHECK (type::text <> '') NOT VALID`); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := outboxsql.Adopt(ctx, db.Pool, "outboxevent", "aggregateid"); err != nil {
			t.Fatalf("adopt #%d: %v", i+1, err)
		}
	}
	if defs := checkConstraints(t, db.Pool, "outboxevent"); len(defs) != 0 {
		t.Errorf("CHECK constraints after adopt: %v, want none", defs)
	}
	defs, _ := rowCheckTriggers(t, db.Pool, "outboxevent")
	wantRowCheckTriggers(t, defs, "outboxevent", "outboxevent_check_row", "aggregateid, type, headers, topic")
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM outboxevent`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("%d rows after adopt (err %v), want the 3 old ones", n, err)
	}
	for _, stmt := range []string{
		`UPDATE outboxevent SET locked_until = now() + interval '30 seconds', locked_by = 'relay', claim_token = gen_random_uuid()`,
		`UPDATE outboxevent SET published_at = now()`,
	} {
		if calls := checkFunctionCalls(t, db.Pool, "outboxevent", stmt); calls != 0 {
			t.Errorf("%s ran the row checks %d times, want 0", stmt, calls)
		}
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
// trigger and function (in the table's schema). Adopt finds the event type
// column by name (none: no event type rule), and shortens the names of a
// long table name's function, trigger and rules, keeping the suffix.
func TestAdoptAddsTheMigrationsChecks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	migratedDefs, migratedSrc := rowCheckTriggers(t, db.Pool, "outbox")
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE events (id uuid PRIMARY KEY, aggregate_id text NOT NULL, event_type text NOT NULL, payload jsonb)`); err != nil {
		t.Fatal(err)
	}
	if err := outboxsql.AdoptTable(ctx, db.Pool, db.Schema+".events", outboxsql.AdoptColumns{}); err != nil {
		t.Fatal(err)
	}
	adoptedDefs, adoptedSrc := rowCheckTriggers(t, db.Pool, "events")
	if got := strings.ReplaceAll(adoptedSrc, "events_", "outbox_"); got != migratedSrc {
		t.Errorf("function:\n adopted  %s\nmigrated %s", adoptedSrc, migratedSrc)
	}
	for name, def := range migratedDefs {
		adopted := adoptedDefs["events"+strings.TrimPrefix(name, "outbox")]
		if got := strings.ReplaceAll(strings.ReplaceAll(adopted, "events_", "outbox_"), ".events ", ".outbox "); got != def {
			t.Errorf("trigger %s:\n adopted  %s\nmigrated %s", name, adopted, def)
		}
	}
	if len(adoptedDefs) != len(migratedDefs) {
		t.Errorf("triggers: adopted %v, migrated %v", adoptedDefs, migratedDefs)
	}
	// The function is in the table's schema (the test's), not only in the
	// first schema of the search_path.
	var inSchema bool
	if err := db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_proc WHERE proname = 'events_check_row' AND pronamespace = to_regnamespace($1))`,
		pgx.Identifier{db.Schema}.Sanitize()).Scan(&inSchema); err != nil || !inSchema {
		t.Errorf("events_check_row in the table's schema %s: %v (err %v)", db.Schema, inSchema, err)
	}

	long := strings.Repeat("ü", 28) + "_events" // 63 bytes
	debeziumTable(t, db.Pool, long)
	for i := 0; i < 2; i++ {
		if err := outboxsql.Adopt(ctx, db.Pool, long, "aggregateid"); err != nil {
			t.Fatalf("adopt #%d %s: %v", i+1, long, err)
		}
	}
	defs, src := rowCheckTriggers(t, db.Pool, pgx.Identifier{long}.Sanitize())
	all := fmt.Sprint(defs) + src
	// The function's name gets a hash of the table's: see the next table.
	for _, name := range []string{`"` + strings.Repeat("ü", 26) + `_row_checks"`, `"` + strings.Repeat("ü", 21) + "_row_checks_on_update", `"` + strings.Repeat("ü", 22) + "_", `_check_row"()`, "'" + strings.Repeat("ü", 23) + "_event_type_check"} {
		if !strings.Contains(all, name) {
			t.Errorf("no %s in the triggers or their function of %s:\n%s\n%s", name, long, defs, src)
		}
	}
	if len(defs) != 2 {
		t.Errorf("triggers of %s: %v", long, defs)
	}
	if !strings.Contains(src, `NEW."type"::text <> ''`) {
		t.Errorf("the event type rule of %s is not on its type column:\n%s", long, src)
	}
	_, err := db.Pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{long}.Sanitize()+` (id, aggregatetype, aggregateid, type, payload) VALUES (gen_random_uuid(), 'Order', 'o-1', '', '{}')`)
	wantCheckViolation(t, "empty type in "+long, err, strings.Repeat("ü", 23)+"_event_type_check")
	// A second long name with the same first 53 bytes, other columns: its
	// own function; the first table's INSERTs still work (they failed with
	// `record "new" has no field "aggregate_id"` when both shared one).
	long2 := strings.Repeat("ü", 28) + "_other"
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE `+pgx.Identifier{long2}.Sanitize()+` (id uuid PRIMARY KEY, aggregate_id text NOT NULL, event_type text NOT NULL, payload jsonb)`); err != nil {
		t.Fatal(err)
	}
	if err := outboxsql.Adopt(ctx, db.Pool, long2, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{long}.Sanitize()+` (id, aggregatetype, aggregateid, type, payload) VALUES (gen_random_uuid(), 'Order', 'o-1', 't', '{}')`); err != nil {
		t.Errorf("a good row into %s after adopting %s: %v", long, long2, err)
	}
	_, err = db.Pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{long2}.Sanitize()+` (id, aggregate_id, event_type, payload) VALUES (gen_random_uuid(), '', 't', '{}')`)
	wantCheckViolation(t, "empty aggregate_id in "+long2, err, strings.Repeat("ü", 22)+"_aggregate_id_check")

	// No event type column that Adopt knows: no event type rule.
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE other (id uuid PRIMARY KEY, aggregate_id text NOT NULL, kind text NOT NULL, payload jsonb)`); err != nil {
		t.Fatal(err)
	}
	if err := outboxsql.Adopt(ctx, db.Pool, "other", ""); err != nil {
		t.Fatal(err)
	}
	defs, src = rowCheckTriggers(t, db.Pool, "other")
	if strings.Contains(src, "other_event_type_check") || !strings.Contains(src, "other_aggregate_id_check") {
		t.Errorf("checks of a table without event_type or type:\n%s", src)
	}
	wantRowCheckTriggers(t, defs, "other", "other_check_row", "aggregate_id, headers, topic")
}

// Columns adopt must cope with: a mapped column named with a reserved word
// or holding "$fn$" is adopted and checked; a headers column that is not
// jsonb makes adopt fail with the reason, leaving the table and its
// producers as they were (before, adopt succeeded and every later INSERT
// failed: PL/pgSQL checks a body's types only when it runs).
func TestAdoptOddColumns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.DB(t)
	for _, col := range []string{"order", "user", `agg$fn$x`, `Agg "Id"`} {
		table := "odd_" + strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' {
				return r
			}
			return '_'
		}, strings.ToLower(col))
		c := pgx.Identifier{col}.Sanitize()
		if _, err := db.Pool.Exec(ctx, `CREATE TABLE `+table+` (id uuid PRIMARY KEY, `+c+` text NOT NULL, event_type text NOT NULL, payload jsonb)`); err != nil {
			t.Fatal(err)
		}
		if err := outboxsql.AdoptTable(ctx, db.Pool, table, outboxsql.AdoptColumns{AggregateID: col}); err != nil {
			t.Errorf("adopt with the aggregate ID column %q: %v", col, err)
			continue
		}
		_, err := db.Pool.Exec(ctx, `INSERT INTO `+table+` (id, `+c+`, event_type, payload) VALUES (gen_random_uuid(), '', 't', '{}')`)
		wantCheckViolation(t, "empty "+col, err, table+"_aggregate_id_check")
		if _, err := db.Pool.Exec(ctx, `INSERT INTO `+table+` (id, `+c+`, event_type, payload) VALUES (gen_random_uuid(), 'a', 't', '{}')`); err != nil {
			t.Errorf("a good row with the aggregate ID column %q: %v", col, err)
		}
	}
	for _, typ := range []string{"json", "text"} {
		table := "headers_" + typ
		if _, err := db.Pool.Exec(ctx, `CREATE TABLE `+table+` (id uuid PRIMARY KEY, aggregate_id text NOT NULL, event_type text NOT NULL, payload jsonb, headers `+typ+`)`); err != nil {
			t.Fatal(err)
		}
		err := outboxsql.Adopt(ctx, db.Pool, table, "")
		if err == nil || !strings.Contains(err.Error(), "row checks do not apply") || !strings.Contains(err.Error(), "jsonb_typeof") {
			t.Errorf("adopt with headers %s: %v, want the row checks refused, naming jsonb_typeof", typ, err)
		}
		t.Logf("headers %s: %v", typ, err)
		if _, err := db.Pool.Exec(ctx, `INSERT INTO `+table+` (id, aggregate_id, event_type, payload) VALUES (gen_random_uuid(), 'a', 't', '{}')`); err != nil {
			t.Errorf("a producer's INSERT after the failed adopt (headers %s): %v", typ, err)
		}
	}
}

// Migration 8 under a producer that read the outbox table and then inserts
// into it, in one transaction: the migration waits, and the producer
// commits. When migration 8 took CREATE TRIGGER's SHARE ROW EXCLUSIVE lock
// before DROP CONSTRAINT's ACCESS EXCLUSIVE, the producer's INSERT failed
// with "deadlock detected".
func TestMigrationDoesNotDeadlockAProducer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.DB(t)
	p := migrations(t, db.Pool)
	if _, err := p.UpTo(ctx, 7); err != nil {
		t.Fatal(err)
	}
	producer, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Rollback(ctx)
	if _, err := producer.Exec(ctx, `SELECT count(*) FROM outbox`); err != nil {
		t.Fatal(err)
	}
	migrated := make(chan error, 1)
	go func() {
		_, err := p.UpTo(ctx, 8)
		migrated <- err
	}()
	// The migration waits for the producer's lock on the table.
	testenv.Eventually(t, 10*time.Second, func() bool {
		var waiting bool
		err := db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE relation = 'outbox'::regclass AND NOT granted)`).Scan(&waiting)
		return err == nil && waiting
	}, "migration 8 never waited for the producer's lock")
	if _, err := producer.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload) VALUES (gen_random_uuid(), 'a', 't', '{}')`); err != nil {
		t.Fatalf("the producer's INSERT while migration 8 waits: %v", err)
	}
	if err := producer.Commit(ctx); err != nil {
		t.Fatalf("the producer's commit: %v", err)
	}
	select {
	case err := <-migrated:
		if err != nil {
			t.Fatalf("migration 8: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("migration 8 did not finish within 30s of the producer's commit")
	}
}

// A writer's search_path cannot shadow what the checks call: the function
// runs with search_path pg_catalog, pg_temp. Before, a schema of the
// writer's own with octet_length(text) returning 1, put before pg_catalog,
// let a 2,000-byte aggregate ID in.
func TestRowChecksIgnoreTheWritersSearchPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	shadow := db.Schema + "_shadow"
	if _, err := db.Pool.Exec(ctx, `CREATE SCHEMA `+shadow+`;
CREATE FUNCTION `+shadow+`.octet_length(text) RETURNS integer LANGUAGE sql IMMUTABLE AS 'SELECT 1'`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Pool.Exec(context.Background(), `DROP SCHEMA `+shadow+` CASCADE`) })
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('search_path', $1, true)`, shadow+", pg_catalog, "+db.Schema); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT octet_length(repeat('x', 2000))`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("the shadow function is not in effect: %d, %v", n, err)
		}
		_, err := tx.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload) VALUES (gen_random_uuid(), repeat('x', 2000), 't', '{}')`)
		return err
	})
	wantCheckViolation(t, "a 2,000-byte aggregate ID under a shadowing search_path", err, "outbox_aggregate_id_check")
}
