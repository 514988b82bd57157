package sql

import (
	"context"
	"fmt"
	"github.com/pgoutbox/outbox/internal/sqlname"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// AdoptColumns names the columns of an adopted table that hold an event's
// aggregate ID and type; AdoptTable's row checks and indexes use
// them. The relay's own columns (headers, topic, seq, ...) always have
// pgoutbox's names.
type AdoptColumns struct {
	// AggregateID is the aggregate ID (Kafka key) column. Defaults to
	// "aggregate_id"; Debezium: "aggregateid".
	AggregateID string
	// EventType is the event type column. Defaults to "event_type";
	// Debezium: "type".
	EventType string
	// Payload is the payload column (the relay's lease.Columns.Payload),
	// whose size the insert trigger records in payload_size, so that a
	// claim can bound the bytes it returns (lease.Config.MaxBatchBytes).
	// Defaults to "payload" (Debezium's too).
	Payload string
}

// Adopt is AdoptTable with the aggregate ID column aggregateColumn
// ("aggregate_id" if empty), the payload column "payload", and the event
// type column found in the table:
// "event_type" if it has one, else "type" (Debezium's); with neither, the
// <table>_event_type_check rule is left out. Errors are wrapped as
// "adopt <table>: ...".
func Adopt(ctx context.Context, pool *pgxpool.Pool, table, aggregateColumn string) error {
	return adoptFinding(ctx, pool, table, AdoptColumns{AggregateID: aggregateColumn})
}

// adoptFinding is Adopt with the columns of cols, the event type column
// found in the table.
func adoptFinding(ctx context.Context, pool *pgxpool.Pool, table string, cols AdoptColumns) error {
	t := sqlname.Quote(table)
	var typ *string
	err := pool.QueryRow(ctx, `SELECT (array_agg(attname::text ORDER BY attname::text))[1] FROM pg_attribute
WHERE attrelid = $1::regclass AND attname IN ('event_type', 'type') AND attnum > 0 AND NOT attisdropped`, t).Scan(&typ)
	if err != nil {
		return fmt.Errorf("adopt %s: %w", table, err)
	}
	if typ != nil {
		cols.EventType = *typ // "event_type" sorts before "type"
	}
	if cols.AggregateID == "" {
		cols.AggregateID = "aggregate_id"
	}
	if cols.Payload == "" {
		cols.Payload = "payload"
	}
	return adopt(ctx, pool, table, cols)
}

// AdoptWith is AdoptTable, except that an empty cols.EventType is found
// in the table as Adopt finds it ("event_type", else "type", else no
// event type rule): `outbox-relay adopt` with its --column-* flags.
// Errors are wrapped as "adopt <table>: ...".
func AdoptWith(ctx context.Context, pool *pgxpool.Pool, table string, cols AdoptColumns) error {
	if cols.EventType == "" {
		return adoptFinding(ctx, pool, table, cols)
	}
	return AdoptTable(ctx, pool, table, cols)
}

// AdoptTable prepares an existing outbox table whose producers cannot
// change — typically a Debezium outbox table (id uuid, aggregatetype,
// aggregateid, type, payload), as Debezium's Outbox Event Router documents
// it — for outbox-relay: it adds the relay's bookkeeping columns (seq,
// headers, topic, created_at, published_at, locked_until, locked_by,
// claim_token, attempts, last_error, dead_lettered_at; key_partition and
// payload_size, filled in by an insert trigger), all with defaults
// so the producers' INSERTs keep working, the same indexes and storage
// settings as the migrations give the outbox table, and the table's
// order-guard table (<table>_order_guard). table may be schema-qualified.
//
// It also adds the row checks of migration 00008 on the mapped columns, so
// that producers cannot insert a row the Go writer would refuse: triggers
// <table>_row_checks (BEFORE INSERT) and <table>_row_checks_on_update
// (AFTER UPDATE of the checked columns) running the function
// <table>_check_row, in the table's schema, that
// refuses a new row with SQLSTATE 23514 (check_violation) naming one of
// <table>_aggregate_id_check (cols.AggregateID: not empty, at most
// outbox.MaxAggregateIDBytes = 1024 bytes as octet_length counts them),
// <table>_event_type_check (cols.EventType: not empty),
// <table>_headers_check (NULL or a JSON object of strings, no empty or
// reserved name) or <table>_topic_check (NULL or a legal Kafka topic
// name), with PostgreSQL's message for a CHECK constraint and a DETAIL
// giving the rule. The rows already in the table are kept as they are, and
// the relay's updates (which name none of those columns) never run the
// checks. The CHECK constraints of those names that an earlier adopt added
// are dropped: the triggers replace them. The rules are planned on the
// table's columns before anything is created: a headers column that is not
// jsonb, or a topic column that is not text, fails adopt with the reason
// (ALTER the column first), and the table is left as it was. A table name
// too long for PostgreSQL's 63-byte identifiers is shortened in these
// names, keeping the suffix, as PostgreSQL shortens the names it chooses;
// the function's name then also gets a hash of the table's, so that two
// long table names of one schema do not share it.
//
// It refuses, changing nothing, an UNLOGGED table (*UnloggedError: a
// crash would empty it) and a table whose UPDATEs fail because a
// publication publishes them and it has no usable replica identity
// (*ReplicaIdentityError: every claim and mark would fail with SQLSTATE
// 55000), naming the fix.
//
// It is idempotent and serialized by an advisory lock, so it is safe to run
// twice and from two processes. Adding seq rewrites the table (an identity
// column is filled for existing rows), under an ACCESS EXCLUSIVE lock: run
// it at a quiet time on a large table. Creating the aggregate index fails
// (SQLSTATE 54000) if an existing aggregate ID is too long for a B-tree
// entry (about 2,700 bytes). Producers must stop deleting their rows right
// after inserting them (a Debezium habit, since Debezium reads the WAL):
// the relay reads the table. Errors are wrapped as "adopt <table>: ...".
func AdoptTable(ctx context.Context, pool *pgxpool.Pool, table string, cols AdoptColumns) error {
	if cols.AggregateID == "" {
		cols.AggregateID = "aggregate_id"
	}
	if cols.EventType == "" {
		cols.EventType = "event_type"
	}
	if cols.Payload == "" {
		cols.Payload = "payload"
	}
	return adopt(ctx, pool, table, cols)
}

// adopt is AdoptTable without the defaults: an empty cols.EventType leaves
// out the event type's rule.
func adopt(ctx context.Context, pool *pgxpool.Pool, table string, cols AdoptColumns) error {
	if err := checkAdoptable(ctx, pool, table); err != nil {
		return fmt.Errorf("adopt %s: %w", table, err)
	}
	var compression bool
	if err := pool.QueryRow(ctx, `SELECT current_setting('server_version_num')::integer >= 140000`).Scan(&compression); err != nil {
		return fmt.Errorf("adopt %s: %w", table, err)
	}
	parts := strings.Split(table, ".")
	t := sqlname.Quote(table)
	name := parts[len(parts)-1]
	idx := func(suffix string) string { return sqlname.Column(name + suffix) }
	guard := sqlname.OrderGuard(table)
	agg := sqlname.Column(cols.AggregateID)
	var partitioned, hasSeq bool
	if err := pool.QueryRow(ctx, `SELECT coalesce((SELECT relkind = 'p' FROM pg_class WHERE oid = to_regclass($1)), false),
  EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'seq' AND NOT attisdropped)`, t).Scan(&partitioned, &hasSeq); err != nil {
		return fmt.Errorf("adopt %s: %w", table, err)
	}
	// Storage parameters first: adding the seq column rewrites the table,
	// and the rewrite packs the backlog by this fillfactor. A partitioned
	// table has no storage and refuses them: they go to each of its
	// partitions (every level) instead; partitions created later need them
	// too (sql.PartitionStorage).
	storage := `ALTER TABLE ` + t + ` SET (` + PartitionStorage + `)`
	if partitioned {
		storage = `DO $adopt$ DECLARE p regclass; BEGIN
  FOR p IN SELECT relid FROM pg_partition_tree(` + sqlname.Literal(t) + `::regclass) WHERE isleaf AND level > 0 LOOP
    EXECUTE format('ALTER TABLE %s SET (` + strings.ReplaceAll(PartitionStorage, "'", "''") + `)', p);
  END LOOP;
END $adopt$`
	}
	// seq: an identity column, whose sequence the table owns. PostgreSQL
	// (before 17) refuses to add an identity column to a partitioned table
	// that has partitions; there seq is a column filled by nextval of a
	// sequence the column owns (as serial's is), which the claim floor and
	// the checks find the same way (pg_depend). Its default, unlike
	// GENERATED ALWAYS, lets an INSERT give a seq of its own: producers
	// must not.
	seqCol := `ADD COLUMN IF NOT EXISTS seq bigint GENERATED ALWAYS AS IDENTITY,`
	seqName := sqlname.Sibling(table, "_seq_seq")
	ownSeq := partitioned && !hasSeq
	stmts := []string{
		`SELECT ` + sqlname.XactLock(sqlname.LockAdopt, table),
		storage,
	}
	if ownSeq {
		stmts = append(stmts, `CREATE SEQUENCE IF NOT EXISTS `+seqName+` AS bigint`)
		seqCol = `ADD COLUMN IF NOT EXISTS seq bigint NOT NULL DEFAULT nextval(` + sqlname.Literal(seqName) + `::regclass),`
	}
	stmts = append(stmts,
		`ALTER TABLE `+t+`
  `+seqCol+`
  ADD COLUMN IF NOT EXISTS headers jsonb,
  ADD COLUMN IF NOT EXISTS topic text,
  ADD COLUMN IF NOT EXISTS created_at timestamptz NOT NULL DEFAULT now(),
  ADD COLUMN IF NOT EXISTS published_at timestamptz,
  ADD COLUMN IF NOT EXISTS locked_until timestamptz,
  ADD COLUMN IF NOT EXISTS locked_by text,
  ADD COLUMN IF NOT EXISTS claim_token uuid,
  ADD COLUMN IF NOT EXISTS attempts integer NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS last_error text,
  ADD COLUMN IF NOT EXISTS dead_lettered_at timestamptz`)
	if ownSeq {
		stmts = append(stmts, `ALTER SEQUENCE `+seqName+` OWNED BY `+t+`.seq`)
	}
	stmts = append(stmts,
		`CREATE INDEX IF NOT EXISTS `+idx("_unpublished_seq_idx")+` ON `+t+` (seq) WHERE published_at IS NULL`,
		`CREATE INDEX IF NOT EXISTS `+idx("_unpublished_aggregate_idx")+` ON `+t+` (`+agg+`, seq) WHERE published_at IS NULL`,
		`CREATE INDEX IF NOT EXISTS `+idx("_dead_letters_idx")+` ON `+t+` (seq) WHERE dead_lettered_at IS NOT NULL AND published_at IS NULL`,
		`CREATE INDEX IF NOT EXISTS `+idx("_published_at_idx")+` ON `+t+` (published_at) WHERE published_at IS NOT NULL`,
		`CREATE TABLE IF NOT EXISTS `+guard+` (key text PRIMARY KEY, until timestamptz NOT NULL)`,
	)
	stmts = append(stmts, keyPartitionStatements(table, cols.AggregateID, cols.Payload, DefaultPartitions, compression)...)
	// Locked first: adding the columns and constraints below needs the
	// ACCESS EXCLUSIVE lock in the end, and a weaker lock taken on the way
	// (ALTER TABLE SET, CREATE TRIGGER) deadlocks with a producer that read
	// the table and then inserts into it.
	stmts = slices.Insert(stmts, 1, `LOCK TABLE `+t+` IN ACCESS EXCLUSIVE MODE`)
	trigger := sqlname.Column(constraintName(name, "_row_checks"))
	onUpdate := sqlname.Column(constraintName(name, "_row_checks_on_update"))
	on := []string{sqlname.Column(cols.AggregateID)}
	if cols.EventType != "" {
		on = append(on, sqlname.Column(cols.EventType))
	}
	on = append(on, "headers", "topic")
	checks := rowChecks(name, cols)
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
				return err
			}
		}
		// The insert trigger reads the payload column: one the table
		// lacks would fail every producer's INSERT after a successful
		// adopt (PL/pgSQL resolves the body's columns when it first runs).
		if _, err := tx.Exec(ctx, `SELECT pg_column_size(`+sqlname.Column(cols.Payload)+`) FROM `+t+` LIMIT 0`); err != nil {
			return fmt.Errorf("payload column %q (AdoptColumns.Payload, --column-payload): %w", cols.Payload, err)
		}
		// The function goes into the table's own schema, wherever the
		// search_path found the table.
		var schema string
		if err := tx.QueryRow(ctx, `SELECT n.nspname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1::regclass`, t).Scan(&schema); err != nil {
			return err
		}
		fn := sqlname.Column(schema) + "." + sqlname.Column(rowCheckFunctionName(schema, name))
		// PL/pgSQL checks a body's types only when it first runs: the
		// rules are planned here on the table's columns (a headers column
		// of type json would otherwise make every producer INSERT fail
		// after a successful adopt).
		exprs := make([]string, len(checks))
		for i, c := range checks {
			exprs[i] = "(" + c.expr + ")"
		}
		if _, err := tx.Exec(ctx, `SELECT `+strings.Join(exprs, ", ")+` FROM `+t+` AS "new" LIMIT 0`); err != nil {
			return fmt.Errorf("the row checks do not apply to its columns (headers must be jsonb, topic text or varchar): %w", err)
		}
		// The CHECK constraints an earlier adopt added are replaced by the
		// triggers (see migrations/00008_row_check_trigger.sql).
		var drop []string
		for _, c := range checks {
			drop = append(drop, `DROP CONSTRAINT IF EXISTS `+sqlname.Column(c.name))
		}
		for _, s := range []string{
			`ALTER TABLE ` + t + "\n  " + strings.Join(drop, ",\n  "),
			`CREATE OR REPLACE FUNCTION ` + fn + `() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS ` + sqlname.Literal(rowCheckBody(name, cols)),
			// Two triggers, for the reason migration 00008 gives (no BEFORE
			// UPDATE trigger: it would lock every row the relay updates).
			`DROP TRIGGER IF EXISTS ` + trigger + ` ON ` + t,
			`CREATE TRIGGER ` + trigger + ` BEFORE INSERT ON ` + t + `
    FOR EACH ROW EXECUTE FUNCTION ` + fn + `()`,
			`DROP TRIGGER IF EXISTS ` + onUpdate + ` ON ` + t,
			`CREATE TRIGGER ` + onUpdate + ` AFTER UPDATE OF ` + strings.Join(on, ", ") + ` ON ` + t + `
    FOR EACH ROW EXECUTE FUNCTION ` + fn + `()`,
		} {
			if _, err := tx.Exec(ctx, s); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("adopt %s: %w", table, err)
	}
	if err := backfillKeyPartitions(ctx, pool, table, cols.AggregateID); err != nil {
		return fmt.Errorf("adopt %s: %w", table, err)
	}
	return nil
}

// maxAggregateIDBytes is outbox.MaxAggregateIDBytes (this package cannot
// import the writer's: the writer's tests import it through testenv), the
// limit of migration 00008's outbox_aggregate_id_check; the tests compare
// AdoptTable's checks with the migration's.
const maxAggregateIDBytes = 1024

// rowCheck is one of the rules of migration 00008's trigger function (and
// of 00007's CHECK constraints before it) for a table.
type rowCheck struct {
	name   string // <table>_<field>_check, at most 63 bytes: the constraint named in the error
	expr   string // the rule, on the new row (NEW.<column>)
	detail string // the error's DETAIL
}

// rowChecks returns the rules for the table called table (unqualified)
// with columns cols; an empty cols.EventType leaves out the event type's.
// For pgoutbox's own column names they must stay the ones of
// migrations/00008_row_check_trigger.sql (TestAdoptAddsTheMigrationsChecks
// compares the functions). Text casts let them apply to varchar (Debezium)
// columns and to columns of other types, as the relay reads them (::text).
func rowChecks(table string, cols AdoptColumns) []rowCheck {
	agg := "NEW." + sqlname.Column(cols.AggregateID) + "::text"
	checks := []rowCheck{
		{constraintName(table, "_aggregate_id_check"),
			agg + ` <> '' AND octet_length(` + agg + `) <= ` + strconv.Itoa(maxAggregateIDBytes),
			cols.AggregateID + ` must be 1 to ` + strconv.Itoa(maxAggregateIDBytes) + ` bytes.`},
	}
	if cols.EventType != "" {
		typ := "NEW." + sqlname.Column(cols.EventType) + "::text"
		checks = append(checks, rowCheck{constraintName(table, "_event_type_check"), typ + ` <> ''`, cols.EventType + ` must not be empty.`})
	}
	return append(checks,
		rowCheck{constraintName(table, "_headers_check"),
			`NEW.headers IS NULL OR (jsonb_typeof(NEW.headers) = 'object' AND NOT jsonb_path_exists(NEW.headers, 'strict $.* ? (@.type() != "string")')` +
				` AND NOT (NEW.headers ?| ARRAY['', 'event_id', 'event_type', 'aggregate_id']))`,
			`headers must be NULL or a JSON object of strings, with no empty name and none of event_id, event_type, aggregate_id.`},
		rowCheck{constraintName(table, "_topic_check"),
			`NEW.topic IS NULL OR (NEW.topic ~ '^[a-zA-Z0-9._-]+$' AND octet_length(NEW.topic) <= 249 AND NEW.topic NOT IN ('.', '..'))`,
			`topic must be NULL or a Kafka topic name: 1 to 249 characters of a-z A-Z 0-9 . _ -, not "." or "..".`},
	)
}

// rowCheckBody returns the body of table's row-check trigger function:
// each rule of rowChecks, raising a check_violation (SQLSTATE 23514) that
// names the rule's constraint with PostgreSQL's own message for a CHECK
// constraint, as migration 00008 writes it.
func rowCheckBody(table string, cols AdoptColumns) string {
	var b strings.Builder
	b.WriteString("\nBEGIN\n")
	for _, c := range rowChecks(table, cols) {
		lit := sqlname.Literal(c.name)
		b.WriteString("    IF NOT (" + c.expr + ") THEN\n" +
			"        RAISE EXCEPTION USING ERRCODE = 'check_violation', CONSTRAINT = " + lit + ",\n" +
			"            TABLE = TG_TABLE_NAME, SCHEMA = TG_TABLE_SCHEMA,\n" +
			"            MESSAGE = format('new row for relation \"%s\" violates check constraint \"%s\"', TG_TABLE_NAME, " + lit + "),\n" +
			"            DETAIL = " + sqlname.Literal(c.detail) + ";\n" +
			"    END IF;\n")
	}
	b.WriteString("    RETURN NEW;\nEND\n")
	return b.String()
}

// rowCheckFunctionName returns the name of the row-check function of the
// table called table in schema: <table>_check_row, or, when that is longer
// than PostgreSQL's 63 bytes, the table's name shortened and followed by a
// hash of the schema and the whole name, so that two long table names with
// the same beginning do not share (and overwrite) one function. The
// constraint and trigger names need no hash: they belong to one table.
func rowCheckFunctionName(schema, table string) string {
	const suffix = "_check_row"
	if len(table)+len(suffix) <= maxIdentifierBytes {
		return table + suffix
	}
	h := fnv.New32a()
	h.Write([]byte(schema + "." + table))
	return constraintName(table, fmt.Sprintf("_%08x%s", h.Sum32(), suffix))
}

// maxIdentifierBytes is PostgreSQL's identifier limit, NAMEDATALEN - 1:
// longer names are truncated.
const maxIdentifierBytes = 63

// constraintName returns table+suffix, with table shortened (at a UTF-8
// character boundary) so that the whole fits in 63 bytes, as PostgreSQL's
// makeObjectName shortens the names it chooses.
func constraintName(table, suffix string) string {
	keep := maxIdentifierBytes - len(suffix)
	if len(table) > keep {
		for keep > 0 && !utf8.RuneStart(table[keep]) {
			keep--
		}
		table = table[:keep]
	}
	return table + suffix
}
