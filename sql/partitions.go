package sql

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/sqlname"
)

// backfillBatch is how many rows one backfill statement fills in: each is
// its own transaction of a few milliseconds, so writers and relays are
// never held up behind it.
const backfillBatch = 1000

// backfillKeyPartitions fills in key_partition for the unpublished rows
// that predate migration 00009 (aggregateColumn holds their aggregate ID),
// in batches, and records in <table>_partitioning that it is done. Rows
// inserted meanwhile get theirs from the trigger. A table already done is
// left alone.
func backfillKeyPartitions(ctx context.Context, pool *pgxpool.Pool, table, aggregateColumn string) error {
	meta := sqlname.Beside(table, "_partitioning")
	var done bool
	if err := pool.QueryRow(ctx, `SELECT backfilled_at IS NOT NULL FROM `+meta).Scan(&done); err != nil {
		return fmt.Errorf("migrate: key partitions: %w", err)
	}
	if done {
		return nil
	}
	t := sqlname.Quote(table)
	fn := sqlname.Beside(table, "_key_partition")
	var partitioned bool
	if err := pool.QueryRow(ctx, `SELECT relkind = 'p' FROM pg_class WHERE oid = $1::regclass`, t).Scan(&partitioned); err != nil {
		return fmt.Errorf("migrate: key partitions: %w", err)
	}
	// In seq order from where the last batch ended, through the
	// unpublished rows' index: each batch reads only its own rows. On a
	// partitioned table a ctid names a row only within its partition: rows
	// are named by partition (tableoid) and ctid, and created_at lets the
	// executor look in the row's partition alone.
	fill := `WITH batch AS (
  SELECT ctid, seq FROM ` + t + ` WHERE published_at IS NULL AND seq > $1 ORDER BY seq LIMIT ` + fmt.Sprint(backfillBatch) + `
), filled AS (
  UPDATE ` + t + ` SET key_partition = ` + fn + `(` + sqlname.Column(aggregateColumn) + `::text)
  WHERE ctid = ANY(ARRAY(SELECT ctid FROM batch)) AND key_partition IS NULL
)
SELECT max(seq) FROM batch`
	if partitioned {
		fill = `WITH batch AS (
  SELECT tableoid, ctid, created_at, seq FROM ` + t + ` WHERE published_at IS NULL AND seq > $1 ORDER BY seq LIMIT ` + fmt.Sprint(backfillBatch) + `
), filled AS (
  UPDATE ` + t + ` o SET key_partition = ` + fn + `(o.` + sqlname.Column(aggregateColumn) + `::text)
  FROM batch b WHERE o.tableoid = b.tableoid AND o.ctid = b.ctid AND o.created_at = b.created_at AND o.key_partition IS NULL
)
SELECT max(seq) FROM batch`
	}
	for last := int64(-1); ; {
		var next *int64
		if err := pool.QueryRow(ctx, fill, last).Scan(&next); err != nil {
			return fmt.Errorf("migrate: fill in key partitions: %w", err)
		}
		if next == nil {
			break
		}
		last = *next
	}
	if _, err := pool.Exec(ctx, `UPDATE `+meta+` SET backfilled_at = now(), generation = generation + 1`); err != nil {
		return fmt.Errorf("migrate: key partitions: %w", err)
	}
	return nil
}

// checkPartitions returns an error when opts asks for a number of key
// partitions other than the table's.
func checkPartitions(ctx context.Context, pool *pgxpool.Pool, opts MigrateOptions) error {
	if opts.Partitions == 0 {
		return nil
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT partitions FROM `+sqlname.Beside(opts.Table, "_partitioning")).Scan(&n); err != nil {
		return fmt.Errorf("migrate: key partitions: %w", err)
	}
	if n != opts.Partitions {
		return fmt.Errorf("migrate: table %s has %d key partitions, fixed when it was migrated to key partitions (migration 9); it cannot change to %d", opts.Table, n, opts.Partitions)
	}
	return nil
}

// keyPartitionStatements returns what migrations 00009 and 00010 do, for
// an adopted table whose aggregate ID is in aggregateColumn and payload in
// payloadColumn: the key_partition and payload_size columns, the function
// and the insert trigger that fill them in, and the tables of the relays
// and the partitions' owners. compression says the server has
// pg_column_compression (PostgreSQL 14+; see payloadSizeExpr). It is
// idempotent (an adopted table keeps its partition count).
func keyPartitionStatements(table, aggregateColumn, payloadColumn string, partitions int, compression bool) []string {
	parts := strings.Split(table, ".")
	name := parts[len(parts)-1]
	t := sqlname.Quote(table)
	meta, relays, owners := sqlname.Beside(table, "_partitioning"), sqlname.Beside(table, "_relays"), sqlname.Beside(table, "_partitions")
	fn, setFn := sqlname.Beside(table, "_key_partition"), sqlname.Beside(table, "_set_key_partition")
	trigger := sqlname.Column(constraintName(name, "_key_partition_fill"))
	return []string{
		`ALTER TABLE ` + t + ` ADD COLUMN IF NOT EXISTS key_partition integer, ADD COLUMN IF NOT EXISTS payload_size integer`,
		`CREATE TABLE IF NOT EXISTS ` + meta + ` (
    singleton     boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    partitions    integer     NOT NULL CHECK (partitions BETWEEN 1 AND 4096),
    generation    bigint      NOT NULL DEFAULT 0,
    backfilled_at timestamptz)`,
		// Migration 00011's columns: an adopted table's time partitions
		// are its owner's (NULL), but the columns are read.
		`ALTER TABLE ` + meta + ` ADD COLUMN IF NOT EXISTS time_partition_interval interval, ADD COLUMN IF NOT EXISTS time_partitions_ahead integer`,
		`INSERT INTO ` + meta + ` (partitions) VALUES (` + strconv.Itoa(partitions) + `) ON CONFLICT DO NOTHING`,
		`CREATE TABLE IF NOT EXISTS ` + relays + ` (
    member     text        PRIMARY KEY,
    relay_id   text        NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    renewed_at timestamptz NOT NULL DEFAULT now(),
    until      timestamptz NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS ` + owners + ` (
    partition integer     PRIMARY KEY,
    owner     text,
    epoch     bigint      NOT NULL DEFAULT 0,
    since     timestamptz,
    handovers bigint      NOT NULL DEFAULT 0)`,
		`INSERT INTO ` + owners + ` (partition) SELECT generate_series(0, (SELECT partitions FROM ` + meta + `) - 1) ON CONFLICT DO NOTHING`,
		// The partition count the table has (an earlier adopt may have
		// chosen it) goes into the functions, through a DO block.
		`DO $adopt$ DECLARE n integer := (SELECT partitions FROM ` + meta + `); BEGIN
  EXECUTE format($f$CREATE OR REPLACE FUNCTION ` + fn + `(aggregate_id text) RETURNS integer
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, pg_temp
    AS 'SELECT (((get_byte(h, 0)::bigint << 24) | (get_byte(h, 1) << 16) | (get_byte(h, 2) << 8) | get_byte(h, 3)) %% %s)::integer FROM (SELECT sha256(convert_to(aggregate_id, ''UTF8'')) AS h) s'$f$, n);
  EXECUTE format($f$CREATE OR REPLACE FUNCTION ` + setFn + `() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
    AS 'DECLARE h bytea := sha256(convert_to(NEW.` + strings.ReplaceAll(sqlname.Column(aggregateColumn), "'", "''") + `::text, ''UTF8'')); BEGIN NEW.key_partition := (((get_byte(h, 0)::bigint << 24) | (get_byte(h, 1) << 16) | (get_byte(h, 2) << 8) | get_byte(h, 3)) %% %s)::integer; NEW.payload_size := ` + strings.ReplaceAll(strings.ReplaceAll(payloadSizeExpr(payloadColumn, compression), "'", "''"), "%", "%%") + `; RETURN NEW; END'$f$, n);
END $adopt$`,
		`DROP TRIGGER IF EXISTS ` + trigger + ` ON ` + t,
		`CREATE TRIGGER ` + trigger + ` BEFORE INSERT ON ` + t + ` FOR EACH ROW EXECUTE FUNCTION ` + setFn + `()`,
	}
}

// payloadSizeExpr is the size migration 00010's trigger writes to
// payload_size, for the payload column column of the new row: its
// pg_column_size, uncompressed in a BEFORE INSERT trigger, O(1); a value
// already compressed there (INSERT ... SELECT of a stored payload) is
// measured as text instead. Without compression (PostgreSQL 13: no
// pg_column_compression) pg_column_size alone. NULL is 0.
func payloadSizeExpr(column string, compression bool) string {
	p := "NEW." + sqlname.Column(column)
	if !compression {
		return "coalesce(pg_column_size(" + p + "), 0)"
	}
	return "CASE WHEN pg_column_compression(" + p + ") IS NULL THEN coalesce(pg_column_size(" + p + "), 0) ELSE octet_length(" + p + "::text) END"
}
