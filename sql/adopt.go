package sql

import (
	"context"
	"fmt"
	"github.com/pgoutbox/outbox/internal/sqlname"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// AdoptColumns names the columns of an adopted table that hold an event's
// aggregate ID and type; AdoptTable's CHECK constraints and indexes use
// them. The relay's own columns (headers, topic, seq, ...) always have
// pgoutbox's names.
type AdoptColumns struct {
	// AggregateID is the aggregate ID (Kafka key) column. Defaults to
	// "aggregate_id"; Debezium: "aggregateid".
	AggregateID string
	// EventType is the event type column. Defaults to "event_type";
	// Debezium: "type".
	EventType string
}

// Adopt is AdoptTable with the aggregate ID column aggregateColumn
// ("aggregate_id" if empty) and the event type column found in the table:
// "event_type" if it has one, else "type" (Debezium's); with neither, the
// <table>_event_type_check constraint is not added. Errors are wrapped as
// "adopt <table>: ...".
func Adopt(ctx context.Context, pool *pgxpool.Pool, table, aggregateColumn string) error {
	t := sqlname.Quote(table)
	var typ *string
	err := pool.QueryRow(ctx, `SELECT (array_agg(attname::text ORDER BY attname::text))[1] FROM pg_attribute
WHERE attrelid = $1::regclass AND attname IN ('event_type', 'type') AND attnum > 0 AND NOT attisdropped`, t).Scan(&typ)
	if err != nil {
		return fmt.Errorf("adopt %s: %w", table, err)
	}
	cols := AdoptColumns{AggregateID: aggregateColumn}
	if typ != nil {
		cols.EventType = *typ // "event_type" sorts before "type"
	}
	if cols.AggregateID == "" {
		cols.AggregateID = "aggregate_id"
	}
	return adopt(ctx, pool, table, cols)
}

// AdoptTable prepares an existing outbox table whose producers cannot
// change — typically a Debezium outbox table (id uuid, aggregatetype,
// aggregateid, type, payload), as Debezium's Outbox Event Router documents
// it — for outbox-relay: it adds the relay's bookkeeping columns (seq,
// headers, topic, created_at, published_at, locked_until, locked_by,
// claim_token, attempts, last_error, dead_lettered_at), all with defaults
// so the producers' INSERTs keep working, the same indexes and storage
// settings as the migrations give the outbox table, and the table's
// order-guard table (<table>_order_guard). table may be schema-qualified.
//
// It also adds the CHECK constraints of migration 00007 on the mapped
// columns, so that producers cannot insert a row the Go writer would
// refuse: <table>_aggregate_id_check (cols.AggregateID: not empty, at most
// outbox.MaxAggregateIDBytes = 1024 bytes as octet_length counts them),
// <table>_event_type_check (cols.EventType: not empty),
// <table>_headers_check (NULL or a JSON object of strings, no empty or
// reserved name) and <table>_topic_check (NULL or a legal Kafka topic
// name), named so whatever the mapped columns are called. A refused row
// fails with SQLSTATE 23514 (check_violation) naming the constraint. The
// rows already in the table are kept and exempt: each check is "seq <= N
// OR (rule)", N the last seq handed out when it is added, and NOT VALID, so
// adding it scans nothing, and the relay's updates of an old row that
// breaks a rule still succeed (PostgreSQL checks every new row version,
// NOT VALID or not). A table that never had a row gets the plain rules,
// valid. A table name too long for PostgreSQL's 63-byte identifiers is
// shortened in the names, keeping the suffix, as PostgreSQL shortens the
// names it chooses. A constraint that exists under its name is left as it
// is.
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
	return adopt(ctx, pool, table, cols)
}

// adopt is AdoptTable without the defaults: an empty cols.EventType leaves
// out the event type's constraint.
func adopt(ctx context.Context, pool *pgxpool.Pool, table string, cols AdoptColumns) error {
	parts := strings.Split(table, ".")
	t := sqlname.Quote(table)
	name := parts[len(parts)-1]
	idx := func(suffix string) string { return sqlname.Column(name + suffix) }
	guard := sqlname.OrderGuard(table)
	agg := sqlname.Column(cols.AggregateID)
	stmts := []string{
		`SELECT ` + sqlname.XactLock(sqlname.LockAdopt, table),
		// Storage parameters first: adding the identity column rewrites
		// the table, and the rewrite packs the backlog by this fillfactor.
		`ALTER TABLE ` + t + ` SET (fillfactor = 40, autovacuum_vacuum_scale_factor = 0.01,
  autovacuum_vacuum_insert_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.01, vacuum_index_cleanup = on)`,
		`ALTER TABLE ` + t + `
  ADD COLUMN IF NOT EXISTS seq bigint GENERATED ALWAYS AS IDENTITY,
  ADD COLUMN IF NOT EXISTS headers jsonb,
  ADD COLUMN IF NOT EXISTS topic text,
  ADD COLUMN IF NOT EXISTS created_at timestamptz NOT NULL DEFAULT now(),
  ADD COLUMN IF NOT EXISTS published_at timestamptz,
  ADD COLUMN IF NOT EXISTS locked_until timestamptz,
  ADD COLUMN IF NOT EXISTS locked_by text,
  ADD COLUMN IF NOT EXISTS claim_token uuid,
  ADD COLUMN IF NOT EXISTS attempts integer NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS last_error text,
  ADD COLUMN IF NOT EXISTS dead_lettered_at timestamptz`,
		`CREATE INDEX IF NOT EXISTS ` + idx("_unpublished_seq_idx") + ` ON ` + t + ` (seq) WHERE published_at IS NULL`,
		`CREATE INDEX IF NOT EXISTS ` + idx("_unpublished_aggregate_idx") + ` ON ` + t + ` (` + agg + `, seq) WHERE published_at IS NULL`,
		`CREATE INDEX IF NOT EXISTS ` + idx("_dead_letters_idx") + ` ON ` + t + ` (seq) WHERE dead_lettered_at IS NOT NULL AND published_at IS NULL`,
		`CREATE INDEX IF NOT EXISTS ` + idx("_published_at_idx") + ` ON ` + t + ` (published_at) WHERE published_at IS NOT NULL`,
		`CREATE TABLE IF NOT EXISTS ` + guard + ` (key text PRIMARY KEY, until timestamptz NOT NULL)`,
	}
	checks := rowChecks(name, cols)
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
				return err
			}
		}
		// PostgreSQL has no ADD CONSTRAINT IF NOT EXISTS: add the missing
		// ones (the advisory lock keeps a concurrent Adopt out).
		rows, err := tx.Query(ctx, `SELECT conname::text FROM pg_constraint WHERE conrelid = $1::regclass`, t)
		if err != nil {
			return err
		}
		have, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		// The last seq handed out, read under the ACCESS EXCLUSIVE lock
		// that ADD COLUMN took, so no inserting transaction is in flight:
		// rows up to it are exempt (see migrations/00007_row_checks.sql).
		var seqName string
		if err := tx.QueryRow(ctx, `SELECT pg_get_serial_sequence($1, 'seq')`, t).Scan(&seqName); err != nil {
			return err
		}
		var lastSeq *int64
		if err := tx.QueryRow(ctx, `SELECT CASE WHEN is_called THEN last_value END FROM `+seqName).Scan(&lastSeq); err != nil {
			return err
		}
		if lastSeq == nil {
			// No seq handed out: rows only from OVERRIDING SYSTEM VALUE.
			if err := tx.QueryRow(ctx, `SELECT coalesce(max(seq), 0) FROM `+t).Scan(&lastSeq); err != nil {
				return err
			}
		}
		var add []string
		for _, c := range checks {
			if slices.Contains(have, c.name) {
				continue
			}
			if *lastSeq > 0 {
				add = append(add, `ADD CONSTRAINT `+pgx.Identifier{c.name}.Sanitize()+
					` CHECK (seq <= `+strconv.FormatInt(*lastSeq, 10)+` OR (`+c.expr+`)) NOT VALID`)
			} else {
				add = append(add, `ADD CONSTRAINT `+pgx.Identifier{c.name}.Sanitize()+` CHECK (`+c.expr+`)`)
			}
		}
		if len(add) > 0 {
			if _, err := tx.Exec(ctx, `ALTER TABLE `+t+"\n  "+strings.Join(add, ",\n  ")); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("adopt %s: %w", table, err)
	}
	return nil
}

// maxAggregateIDBytes is outbox.MaxAggregateIDBytes (this package cannot
// import the writer's: the writer's tests import it through testenv), the
// limit of migration 00007's outbox_aggregate_id_check; the tests compare
// AdoptTable's constraints with the migration's.
const maxAggregateIDBytes = 1024

// rowCheck is one of migration 00007's CHECK constraints for a table.
type rowCheck struct {
	name string // <table>_<field>_check, at most 63 bytes
	expr string // the rule, without the exemption of old rows
}

// rowChecks returns migration 00007's constraints for the table called
// table (unqualified) with columns cols; an empty cols.EventType leaves
// out the event type's. The expressions must stay those of
// migrations/00007_row_checks.sql (TestAdoptAddsTheMigrationsConstraints
// compares them). Text casts let them apply to varchar (Debezium) columns and
// to columns of other types, as the relay reads them (::text).
func rowChecks(table string, cols AdoptColumns) []rowCheck {
	agg := pgx.Identifier{cols.AggregateID}.Sanitize() + "::text"
	checks := []rowCheck{
		{constraintName(table, "_aggregate_id_check"),
			agg + ` <> '' AND octet_length(` + agg + `) <= ` + strconv.Itoa(maxAggregateIDBytes)},
	}
	if cols.EventType != "" {
		typ := pgx.Identifier{cols.EventType}.Sanitize() + "::text"
		checks = append(checks, rowCheck{constraintName(table, "_event_type_check"), typ + ` <> ''`})
	}
	return append(checks,
		rowCheck{constraintName(table, "_headers_check"),
			`headers IS NULL OR (jsonb_typeof(headers) = 'object' AND NOT jsonb_path_exists(headers, 'strict $.* ? (@.type() != "string")')` +
				` AND NOT (headers ?| ARRAY['', 'event_id', 'event_type', 'aggregate_id']))`},
		rowCheck{constraintName(table, "_topic_check"),
			`topic IS NULL OR (topic ~ '^[a-zA-Z0-9._-]+$' AND octet_length(topic) <= 249 AND topic NOT IN ('.', '..'))`},
	)
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
