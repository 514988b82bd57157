package retention

import (
	"embed"
	"fmt"
	"strconv"

	"github.com/pgoutbox/outbox/internal/sqlfile"
	"github.com/pgoutbox/outbox/internal/sqlname"
)

// The Cleaner's SQL lives in sql/*.sql, named queries grouped by concern
// (delete.sql, drop.sql), rendered by internal/sqlfile (which says how the /* TEMPLATE: name */ slots and
// the @name arguments work) once, when New builds the Cleaner, but for the
// statements on one partition, rendered when the Cleaner has found the
// partition (onPartition).

//go:embed sql/*.sql
var sqlFS embed.FS

// queries are the Cleaner's named queries.
var queries = sqlfile.MustLoad(sqlFS, "sql")

// statements are a Cleaner's SQL, rendered from sql/*.sql by New.
type statements struct {
	// slots are the slots the statements were rendered with, for those
	// on one partition (onPartition: DeleteBatch on the DEFAULT
	// partition, with DropPartitions; Droppable and
	// DropPartition).
	slots map[string]string
	// plainDelete and partitionedDelete are a batch's DELETE on the table,
	// plain (DeleteBatch) or partitioned
	// (DeleteBatchPartitioned).
	plainDelete, partitionedDelete sqlfile.Stmt[deleteArgs]
	// partitioned reads whether the table is partitioned, and its DEFAULT
	// partition (Partitioned).
	partitioned sqlfile.Stmt[tableArgs]
	// cutoff is the retention's cutoff by the database clock (Cutoff).
	cutoff sqlfile.Stmt[retentionArgs]
	// The statements of a partition's drop, in order: lockTimeout,
	// lockTimePartitions, lockTable, then Droppable and
	// DropPartition on the partition (onPartition).
	lockTimeout, lockTimePartitions, lockTable sqlfile.Stmt[sqlfile.NoArgs]
}

// The arguments of the statements, by name: each field's position is its
// $n (internal/sqlfile).
type (
	// deleteArgs: Retention is Config.Retention in microseconds.
	deleteArgs struct {
		Retention int64 `arg:"retention_us"`
		BatchSize int   `arg:"batch_size"`
	}
	// retentionArgs: Retention is Config.Retention in microseconds.
	retentionArgs struct {
		Retention int64 `arg:"retention_us"`
	}
	// tableArgs: Table is the quoted (and schema-qualified) table name.
	tableArgs struct {
		Table string `arg:"table"`
	}
)

// onPartition renders the query name with the partition (quoted, as
// regclass prints it) in its slot slot: the statements on one partition,
// which the Cleaner finds at run time (the DEFAULT partition once, the
// partitions to drop at each pass), are rendered then.
func onPartition[A any](s *statements, name, slot, partition string) (sqlfile.Stmt[A], error) {
	st, err := sqlfile.Render[A](queries, name, sqlfile.With(s.slots, slot, partition))
	if err != nil {
		return st, fmt.Errorf("retention: render %s on %s: %w", name, partition, err)
	}
	return st, nil
}

// newStatements renders cfg's statements (cfg with its defaults). Slots:
// table (quoted), lock_timeout_ms (Config.LockTimeout in milliseconds),
// time_partitions_lock (the advisory lock that serializes the table's
// time partitions, sqlname.XactLock), partition (partitionSlot).
func newStatements(cfg Config) (*statements, error) {
	s := map[string]string{
		"table":                sqlname.Quote(cfg.Table),
		"lock_timeout_ms":      strconv.FormatInt(cfg.LockTimeout.Milliseconds(), 10),
		"time_partitions_lock": sqlname.XactLock(sqlname.LockTimePartitions, cfg.Table),
	}
	st := &statements{slots: s}
	r := sqlfile.Renderer{Set: queries, Slots: s}
	sqlfile.Into(&r, &st.plainDelete, "DeleteBatch")
	sqlfile.Into(&r, &st.partitionedDelete, "DeleteBatchPartitioned")
	sqlfile.Into(&r, &st.partitioned, "Partitioned")
	sqlfile.Into(&r, &st.cutoff, "Cutoff")
	sqlfile.Into(&r, &st.lockTimeout, "LockTimeout")
	sqlfile.Into(&r, &st.lockTimePartitions, "LockTimePartitions")
	sqlfile.Into(&r, &st.lockTable, "LockTable")
	if r.Err != nil {
		return nil, fmt.Errorf("retention: render statements: %w", r.Err)
	}
	return st, nil
}
