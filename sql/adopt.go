package sql

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/pgoutbox/outbox/internal/sqladmin"
	"github.com/pgoutbox/outbox/internal/sqlfile"
	"github.com/pgoutbox/outbox/internal/sqlname"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
	err := pool.QueryRow(ctx, eventTypeColumnStmt.SQL, eventTypeColumnStmt.Args(tableArgs{t})...).Scan(&typ)
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
// change (typically a Debezium outbox table) for the relay, with cols
// naming its columns: it adds the relay's bookkeeping columns with
// defaults (so the producers' INSERTs keep working), the indexes, the
// order-guard table and the row checks of migration 00008 on the mapped
// columns (an INSERT trigger raising SQLSTATE 23514, naming the rule).
// table may be schema-qualified. It is idempotent and serialized by an
// advisory lock; adding seq rewrites the table under an ACCESS EXCLUSIVE
// lock. It changes nothing and returns *UnloggedError or
// *ReplicaIdentityError for a table the relay could not use, or an error
// for a column of the wrong type. docs/operating.md ("Debezium outbox
// tables") says what it adds and why. Errors are wrapped as
// "adopt <table>: ...".
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
	if err := checkAdoptColumns(ctx, pool, table, cols); err != nil {
		return fmt.Errorf("adopt %s: %w", table, err)
	}
	var compression bool
	if err := pool.QueryRow(ctx, columnCompressionStmt.SQL).Scan(&compression); err != nil {
		return fmt.Errorf("adopt %s: %w", table, err)
	}
	t := sqlname.Quote(table)
	var partitioned, hasSeq bool
	if err := pool.QueryRow(ctx, adoptTableShapeStmt.SQL, adoptTableShapeStmt.Args(tableArgs{t})...).Scan(&partitioned, &hasSeq); err != nil {
		return fmt.Errorf("adopt %s: %w", table, err)
	}
	stmts, err := adoptStatements(table, cols, partitioned, hasSeq, compression)
	if err != nil {
		return fmt.Errorf("adopt %s: %w", table, err)
	}
	checks, err := rowChecks(tableName(table), cols)
	if err != nil {
		return fmt.Errorf("adopt %s: %w", table, err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
				return err
			}
		}
		return addRowChecks(ctx, tx, table, cols, checks)
	})
	if err != nil {
		return fmt.Errorf("adopt %s: %w", table, err)
	}
	if err := backfillKeyPartitions(ctx, pool, table, cols.AggregateID); err != nil {
		return fmt.Errorf("adopt %s: %w", table, err)
	}
	return nil
}

// checkAdoptColumns returns an error naming each column of cols the table
// lacks, with the AdoptColumns field and the flag that name it.
func checkAdoptColumns(ctx context.Context, pool *pgxpool.Pool, table string, cols AdoptColumns) error {
	named := []struct{ column, role, field, flag string }{
		{cols.AggregateID, "aggregate ID", "AggregateID", "--column-aggregate-id"},
		{cols.EventType, "event type", "EventType", "--column-event-type"},
		{cols.Payload, "payload", "Payload", "--column-payload"},
	}
	var names []string
	for _, n := range named {
		if n.column != "" {
			names = append(names, n.column)
		}
	}
	var missing []string
	if err := pool.QueryRow(ctx, missingColumnsStmt.SQL, missingColumnsStmt.Args(columnsArgs{sqlname.Quote(table), names})...).Scan(&missing); err != nil {
		return err
	}
	var lacks []string
	for _, m := range missing {
		for _, n := range named {
			if n.column == m {
				lacks = append(lacks, fmt.Sprintf("%s column %q (AdoptColumns.%s, %s)", n.role, m, n.field, n.flag))
				break
			}
		}
	}
	if len(lacks) > 0 {
		return fmt.Errorf("the table has no %s: name its columns with those flags (--debezium names Debezium's: aggregateid, type, payload); nothing was changed", strings.Join(lacks, ", "))
	}
	return nil
}

// tableName is table's own name, without its schema.
func tableName(table string) string {
	parts := strings.Split(table, ".")
	return parts[len(parts)-1]
}

// adoptStatements returns adopt's statements up to the row checks, for a
// table that is partitioned or not and has a seq column or not, on a
// server with pg_column_compression or not: the lock, the storage
// parameters, the columns, the indexes, the order guard and the key
// partitions (keyPartitionStatements), in that order.
func adoptStatements(table string, cols AdoptColumns, partitioned, hasSeq, compression bool) ([]string, error) {
	name := tableName(table)
	// Index names are cut with a hash when too long (sqlname.BesideName):
	// cut by the server, a long table's four would be one name, or the
	// table's own, and CREATE INDEX IF NOT EXISTS would skip them.
	idx := func(suffix string) string { return sqlname.Column(sqlname.BesideName(name, suffix)) }
	seqName := sqlname.Beside(table, "_seq_seq")
	st := newScript(sqlfile.With(tableSlots(table),
		"lock", sqlname.XactLock(sqlname.LockAdopt, table),
		"storage", sqladmin.PartitionStorage, "storage_literal", sqlname.Literal(sqladmin.PartitionStorage),
		"sequence", seqName, "sequence_literal", sqlname.Literal(seqName),
		"aggregate", sqlname.Column(cols.AggregateID)))
	st.add("XactLock")
	// Locked first (LockTable says why).
	st.add("LockTable")
	// Storage parameters first: adding the seq column rewrites the table,
	// and the rewrite packs the backlog by this fillfactor. A partitioned
	// table has no storage: they go to each of its partitions instead.
	if partitioned {
		st.add("SetPartitionStorage")
	} else {
		st.add("SetStorage")
	}
	// seq: an identity column, but on a partitioned table that has
	// partitions, which refuses one (before PostgreSQL 17): a column
	// filled by nextval of a sequence the column owns.
	ownSeq := partitioned && !hasSeq
	seqQuery := "SeqIdentityColumn"
	if ownSeq {
		st.add("CreateSeqSequence")
		seqQuery = "SeqNextvalColumn"
	}
	seqColumn, err := queries.Fill(seqQuery, st.slots)
	if err != nil {
		return nil, fmt.Errorf("render statement: %w", err)
	}
	// Adding seq numbers the rows already there in their order on disk:
	// they are numbered again in the order they were written in.
	if !hasSeq {
		st.add("AdoptCaptureOrder")
	}
	st.add("AdoptColumns", "seq_column", seqColumn)
	if ownSeq {
		st.add("OwnSeqSequence")
	}
	if !hasSeq {
		if !ownSeq {
			st.add("AdoptSeqByDefault")
		}
		st.add("AdoptRenumberSeq")
		if !ownSeq {
			st.add("AdoptSeqAlways")
		}
	}
	st.add("AdoptUnpublishedSeqIndex", "index", idx("_unpublished_seq_idx"))
	st.add("AdoptUnpublishedAggregateIndex", "index", idx("_unpublished_aggregate_idx"))
	st.add("AdoptDeadLettersIndex", "index", idx("_dead_letters_idx"))
	st.add("AdoptPublishedAtIndex", "index", idx("_published_at_idx"))
	st.add("AdoptOrderGuard")
	if err := st.err(); err != nil {
		return nil, err
	}
	keys, err := keyPartitionStatements(table, cols.AggregateID, cols.Payload, DefaultPartitions, compression)
	if err != nil {
		return nil, err
	}
	return append(st.stmts, keys...), nil
}

// addRowChecks adds table's row checks (checks, rowChecks') in tx: it
// checks the payload column and plans the rules on the table's columns,
// then drops the CHECK constraints an earlier adopt added and creates the
// function and its two triggers.
func addRowChecks(ctx context.Context, tx pgx.Tx, table string, cols AdoptColumns, checks []rowCheck) error {
	// The insert trigger reads the payload column: one the table lacks
	// would fail every producer's INSERT after a successful adopt.
	payload, err := renderTable[sqlfile.NoArgs]("PayloadColumnCheck", table, "payload", sqlname.Column(cols.Payload))
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, payload.SQL); err != nil {
		return fmt.Errorf("payload column %q (AdoptColumns.Payload, --column-payload): %w", cols.Payload, err)
	}
	// The function goes into the table's own schema, wherever the
	// search_path found the table.
	schema, err := sqladmin.TableSchema(ctx, tx, table)
	if err != nil {
		return err
	}
	name := tableName(table)
	fn := sqlname.Column(schema) + "." + sqlname.Column(rowCheckFunctionName(schema, name))
	on := []string{sqlname.Column(cols.AggregateID)}
	if cols.EventType != "" {
		on = append(on, sqlname.Column(cols.EventType))
	}
	on = append(on, "headers", "topic")
	exprs := make([]string, len(checks))
	drops := make([]string, len(checks))
	for i, c := range checks {
		exprs[i] = "(" + c.expr + ")"
		if drops[i], err = queries.Fill("DropConstraint", map[string]string{"constraint": sqlname.Column(c.name)}); err != nil {
			return fmt.Errorf("render statement: %w", err)
		}
	}
	body, err := rowCheckBody(checks)
	if err != nil {
		return err
	}
	trigger, onUpdate := sqlname.Column(constraintName(name, "_row_checks")), sqlname.Column(constraintName(name, "_row_checks_on_update"))
	st := newScript(sqlfile.With(tableSlots(table),
		"rules", strings.Join(exprs, ", "),
		"drops", strings.Join(drops, ",\n  "),
		"function", fn, "body_literal", sqlname.Literal(body),
		"columns", strings.Join(on, ", ")))
	st.add("PlanRowChecks")
	// The CHECK constraints an earlier adopt added are replaced by the
	// triggers; two triggers, for the reason migration 00008 gives.
	st.add("DropRowCheckConstraints")
	st.add("CreateRowCheckFunction")
	st.add("DropTrigger", "trigger", trigger)
	st.add("CreateRowCheckInsertTrigger", "trigger", trigger)
	st.add("DropTrigger", "trigger", onUpdate)
	st.add("CreateRowCheckUpdateTrigger", "trigger", onUpdate)
	if err := st.err(); err != nil {
		return err
	}
	// PL/pgSQL checks a body's types only when it first runs: the rules
	// are planned here on the table's columns.
	if _, err := tx.Exec(ctx, st.stmts[0]); err != nil {
		return fmt.Errorf("the row checks do not apply to its columns (headers must be jsonb, topic text or varchar): %w", err)
	}
	for _, s := range st.stmts[1:] {
		if _, err := tx.Exec(ctx, s); err != nil {
			return err
		}
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
// with columns cols (queries/adopt.sql, RowCheck*); an empty cols.EventType
// leaves out the event type's. For pgoutbox's own column names they must
// stay the ones of migrations/00008_row_check_trigger.sql
// (TestAdoptAddsTheMigrationsChecks compares the functions). Text casts
// let them apply to varchar (Debezium) columns and to columns of other
// types, as the relay reads them (::text).
func rowChecks(table string, cols AdoptColumns) ([]rowCheck, error) {
	type rule struct{ name, query, detail string }
	rules := []rule{
		{constraintName(table, "_aggregate_id_check"), "RowCheckAggregateID",
			cols.AggregateID + ` must be 1 to ` + strconv.Itoa(maxAggregateIDBytes) + ` bytes.`},
	}
	if cols.EventType != "" {
		rules = append(rules, rule{constraintName(table, "_event_type_check"), "RowCheckEventType", cols.EventType + ` must not be empty.`})
	}
	rules = append(rules,
		rule{constraintName(table, "_headers_check"), "RowCheckHeaders",
			`headers must be NULL or a JSON object of strings, with no empty name and none of event_id, event_type, aggregate_id.`},
		rule{constraintName(table, "_topic_check"), "RowCheckTopic",
			`topic must be NULL or a Kafka topic name: 1 to 249 characters of a-z A-Z 0-9 . _ -, not "." or "..".`},
	)
	slots := map[string]string{
		"aggregate":  sqlname.Column(cols.AggregateID),
		"event_type": sqlname.Column(cols.EventType),
		"max_bytes":  strconv.Itoa(maxAggregateIDBytes),
	}
	checks := make([]rowCheck, len(rules))
	for i, r := range rules {
		expr, err := queries.Fill(r.query, slots)
		if err != nil {
			return nil, fmt.Errorf("render statement: %w", err)
		}
		checks[i] = rowCheck{name: r.name, expr: expr, detail: r.detail}
	}
	return checks, nil
}

// rowCheckBody returns the body of the row-check trigger function of the
// rules checks (RowCheckBody): each rule raising a
// check_violation (SQLSTATE 23514) that names the rule's constraint with
// PostgreSQL's own message for a CHECK constraint
// (RowCheckRule), as migration 00008 writes it, between
// newlines as there.
func rowCheckBody(checks []rowCheck) (string, error) {
	rules := make([]string, len(checks))
	for i, c := range checks {
		lit := sqlname.Literal(c.name)
		rule, err := queries.Fill("RowCheckRule", map[string]string{
			"rule": c.expr, "constraint_literal": lit, "detail_literal": sqlname.Literal(c.detail),
		})
		if err != nil {
			return "", fmt.Errorf("render statement: %w", err)
		}
		rules[i] = rule
	}
	body, err := queries.Fill("RowCheckBody", map[string]string{"rules": strings.Join(rules, "\n")})
	if err != nil {
		return "", fmt.Errorf("render statement: %w", err)
	}
	return "\n" + body + "\n", nil
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

// checkAdoptable refuses a table Adopt must not prepare: an unlogged one
// (*UnloggedError) or one whose UPDATEs fail for want of a replica
// identity (*ReplicaIdentityError). A table that does not exist is left to
// adopt's own statements, which say so.
func checkAdoptable(ctx context.Context, pool *pgxpool.Pool, table string) error {
	if err := sqladmin.CheckDurability(ctx, pool, table); err != nil {
		return err
	}
	err := sqladmin.CheckReplicaIdentity(ctx, pool, table)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return nil
	}
	return err
}
