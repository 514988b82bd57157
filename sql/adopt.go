package sql

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Adopt prepares an existing outbox table whose producers cannot change —
// typically a Debezium outbox table (id uuid, aggregatetype, aggregateid,
// type, payload), as Debezium's Outbox Event Router documents it — for
// outbox-relay: it adds the relay's bookkeeping columns (seq, headers,
// topic, created_at, published_at, locked_until, locked_by, claim_token,
// attempts, last_error, dead_lettered_at), all with defaults so the
// producers' INSERTs keep working, the same indexes and storage settings as
// the migrations give the outbox table, and the table's order-guard table
// (<table>_order_guard). aggregateColumn is the aggregate ID column
// ("aggregateid" for Debezium). table may be schema-qualified.
//
// It is idempotent and serialized by an advisory lock, so it is safe to run
// twice and from two processes. Adding seq rewrites the table (an identity
// column is filled for existing rows), under an ACCESS EXCLUSIVE lock: run
// it at a quiet time on a large table. Producers must stop deleting their
// rows right after inserting them (a Debezium habit, since Debezium reads
// the WAL): the relay reads the table. Errors are wrapped as "adopt: ...".
func Adopt(ctx context.Context, pool *pgxpool.Pool, table, aggregateColumn string) error {
	parts := strings.Split(table, ".")
	t := pgx.Identifier(parts).Sanitize()
	name := parts[len(parts)-1]
	idx := func(suffix string) string { return pgx.Identifier{name + suffix}.Sanitize() }
	guardParts := append([]string(nil), parts...)
	guardParts[len(guardParts)-1] += "_order_guard"
	guard := pgx.Identifier(guardParts).Sanitize()
	agg := pgx.Identifier{aggregateColumn}.Sanitize()
	stmts := []string{
		`SELECT pg_advisory_xact_lock(1869574001, '` + strings.ReplaceAll(t, `'`, `''`) + `'::regclass::oid::int)`,
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
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
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
