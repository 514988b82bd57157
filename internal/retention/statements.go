package retention

import (
	"embed"
	"fmt"
	"maps"
	"strconv"

	"github.com/pgoutbox/outbox/internal/sqlfile"
	"github.com/pgoutbox/outbox/internal/sqlname"
)

// The Cleaner's SQL lives in sql/*.sql, one statement per file, rendered
// by internal/sqlfile (which says how the /* TEMPLATE: name */ slots and
// the @name arguments work) once, when New builds the Cleaner, but for the
// statements on one partition, rendered when the Cleaner has found the
// partition (onPartition).

//go:embed sql/*.sql
var sqlFS embed.FS

// sqlFiles are the Cleaner's statement files.
var sqlFiles = sqlfile.NewFiles(sqlFS, "sql")

// noArgs is the argument struct of a statement without arguments.
type noArgs = sqlfile.NoArgs

// stmt is one rendered statement whose $1, $2, ... are the fields of A in
// order.
type stmt[A any] = sqlfile.Stmt[A]

// statements are a Cleaner's SQL, rendered from sql/*.sql by New.
type statements struct {
	// slots are the slots the statements were rendered with, for those
	// on one partition (onPartition: delete_batch.sql on the DEFAULT
	// partition, with DropPartitions; droppable.sql and
	// drop_partition.sql).
	slots map[string]string
	// plainDelete and partitionedDelete are a batch's DELETE on the table,
	// plain (delete_batch.sql) or partitioned
	// (delete_batch_partitioned.sql).
	plainDelete, partitionedDelete stmt[deleteArgs]
	// partitioned reads whether the table is partitioned, and its DEFAULT
	// partition (partitioned.sql).
	partitioned stmt[tableArgs]
	// cutoff is the retention's cutoff by the database clock (cutoff.sql).
	cutoff stmt[retentionArgs]
	// The statements of a partition's drop, in order: lockTimeout,
	// lockTimePartitions, lockTable, then droppable.sql and
	// drop_partition.sql on the partition (onPartition).
	lockTimeout, lockTimePartitions, lockTable stmt[noArgs]
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

// onPartition renders sql/<name>.sql with the partition (quoted, as
// regclass prints it) in its slot slot: the statements on one partition,
// which the Cleaner finds at run time (the DEFAULT partition once, the
// partitions to drop at each pass), are rendered then.
func onPartition[A any](s *statements, name, slot, partition string) (stmt[A], error) {
	st, err := sqlfile.Render[A](sqlFiles, name, withSlot(s.slots, slot, partition))
	if err != nil {
		return st, fmt.Errorf("retention: render %s on %s: %w", name, partition, err)
	}
	return st, nil
}

// withSlot returns a copy of slots with name set to value.
func withSlot(slots map[string]string, name, value string) map[string]string {
	out := maps.Clone(slots)
	out[name] = value
	return out
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
	r := sqlfile.Renderer{Files: sqlFiles, Slots: s}
	sqlfile.Into(&r, &st.plainDelete, "delete_batch")
	sqlfile.Into(&r, &st.partitionedDelete, "delete_batch_partitioned")
	sqlfile.Into(&r, &st.partitioned, "partitioned")
	sqlfile.Into(&r, &st.cutoff, "cutoff")
	sqlfile.Into(&r, &st.lockTimeout, "lock_timeout")
	sqlfile.Into(&r, &st.lockTimePartitions, "lock_time_partitions")
	sqlfile.Into(&r, &st.lockTable, "lock_table")
	if r.Err != nil {
		return nil, fmt.Errorf("retention: render statements: %w", r.Err)
	}
	return st, nil
}
