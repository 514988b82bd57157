package retention

import (
	"embed"
	"fmt"
	"maps"
	"strconv"
	"strings"

	"github.com/pgoutbox/outbox/internal/sqlfile"
	"github.com/pgoutbox/outbox/internal/sqlname"
)

// The Cleaner's SQL lives in sql/*.sql, one statement per file, rendered
// by internal/sqlfile (which says how the /* TEMPLATE: name */ slots and
// the @name arguments work) once, when New builds the Cleaner: a pass
// rewrites nothing but the names of the partitions it finds
// (partitionSlot).

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
	// plainDelete and partitionedDelete are a batch's DELETE on the table,
	// plain (delete_batch.sql) or partitioned
	// (delete_batch_partitioned.sql); partitionDelete is delete_batch.sql
	// on a partition left open (partitionSlot): the DEFAULT partition,
	// with DropPartitions.
	plainDelete, partitionedDelete, partitionDelete stmt[deleteArgs]
	// partitioned reads whether the table is partitioned, and its DEFAULT
	// partition (partitioned.sql).
	partitioned stmt[tableArgs]
	// cutoff is the retention's cutoff by the database clock (cutoff.sql).
	cutoff stmt[retentionArgs]
	// droppable says whether a partition, left open, may be dropped
	// (droppable.sql).
	droppable stmt[retentionArgs]
	// The statements of a partition's drop, in order: lockTimeout,
	// lockTimePartitions, lockTable, then droppable again and drop (the
	// partition left open).
	lockTimeout, lockTimePartitions, lockTable, drop stmt[noArgs]
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

// partitionSlot stands for the name of a partition in the statements on
// one partition: the Cleaner finds its partitions at run time (resolve
// the DEFAULT partition, dropPartitions the partitions to drop, at each
// pass), not when New renders them. New fills the slot (partition, or
// table in delete_batch.sql) with this marker, and onPartition puts the
// name in its place. It is the only slot of those statements, and a NUL
// byte is in no name the server prints, so the marker appears nowhere
// else.
const partitionSlot = "\x00partition\x00"

// onPartition returns s, rendered with partitionSlot, on partition (quoted,
// as regclass prints it).
func onPartition[A any](s stmt[A], partition string) stmt[A] {
	return stmt[A]{SQL: strings.ReplaceAll(s.SQL, partitionSlot, partition)}
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
		"partition":            partitionSlot,
	}
	st := &statements{}
	r := sqlfile.Renderer{Files: sqlFiles, Slots: s}
	sqlfile.Into(&r, &st.plainDelete, "delete_batch")
	sqlfile.Into(&r, &st.partitionedDelete, "delete_batch_partitioned")
	sqlfile.Into(&r, &st.partitioned, "partitioned")
	sqlfile.Into(&r, &st.cutoff, "cutoff")
	sqlfile.Into(&r, &st.droppable, "droppable")
	sqlfile.Into(&r, &st.lockTimeout, "lock_timeout")
	sqlfile.Into(&r, &st.lockTimePartitions, "lock_time_partitions")
	sqlfile.Into(&r, &st.lockTable, "lock_table")
	sqlfile.Into(&r, &st.drop, "drop_partition")
	ps := maps.Clone(s)
	ps["table"] = partitionSlot
	r.Slots = ps
	sqlfile.Into(&r, &st.partitionDelete, "delete_batch")
	if r.Err != nil {
		return nil, fmt.Errorf("retention: render statements: %w", r.Err)
	}
	return st, nil
}
