// Package sqladmin reads and keeps an outbox table beyond its migrations:
// the checks that refuse a table the relay must not run on (an UNLOGGED
// table, a missing replica identity), the report of `outbox-relay status`
// and the metrics' table check (Inspect), the role's missing privileges,
// the table's name rules, and its time partitions (reading, listing and
// creating them).
//
// Package sql (the migrations, public) calls it from Migrate and Adopt;
// the relay's start-up check, the outbox-relay command and its metrics
// call it directly. It does not import package sql: the errors a user's
// code checks (UnloggedError, ReplicaIdentityError) and Needs, the type
// of relay.ServiceConfig.Privileges, are defined here and re-exported by
// package sql as aliases.
package sqladmin

import (
	"context"
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox/internal/sqlfile"
	"github.com/pgoutbox/outbox/internal/sqlname"
)

// Querier is what the checks need from a database handle; *pgxpool.Pool,
// *pgx.Conn and pgx.Tx implement it.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// RowQuerier is the part of Querier that SequenceOf and TableSchema
// need.
type RowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// The package's SQL lives in queries/*.sql, named queries grouped by
// concern (catalog.sql, health.sql, partitions.sql), each explained by its
// own comments, rendered by internal/sqlfile. The statements that name no
// table in their text (they take it as an argument, @table) are rendered
// once, when the package is initialized; those that do (FROM
// <table>_partitioning, DDL on the table) are rendered at each call with
// tableSlots, as none is on a hot path.

//go:embed queries/*.sql
var queryFS embed.FS

// queries are the package's named queries.
var queries = sqlfile.MustLoad(queryFS, "queries")

// tableArgs are the arguments of a statement on one table, @table: its
// quoted name (sqlname.Quote), which the statement reads as regclass.
type tableArgs struct {
	Table string `arg:"table"`
}

// fragments are the fragments the catalog statements fill in, by slot:
// seq_of (SeqOf: the sequence of the seq column of the table c) and
// unlogged_partition (UnloggedPartition: the first unlogged partition of
// the table c).
var fragments = map[string]string{
	"seq_of":             queries.MustFill("SeqOf", nil),
	"unlogged_partition": queries.MustFill("UnloggedPartition", nil),
}

// The statements rendered once (see above).
var (
	durabilityStmt       = mustRender[tableArgs]("Durability", fragments)
	sequenceOfStmt       = mustRender[tableArgs]("SequenceOf", fragments)
	inspectTableStmt     = mustRender[tableArgs]("InspectTable", fragments)
	replicaIdentityStmt  = mustRender[tableArgs]("ReplicaIdentity", nil)
	publicationsStmt     = mustRender[tableArgs]("Publications", nil)
	nowStmt              = mustRender[sqlfile.NoArgs]("Now", nil)
	tableSchemaStmt      = mustRender[tableArgs]("TableSchema", nil)
	childPartitionsStmt  = mustRender[tableArgs]("ChildPartitions", nil)
	listPartitionsStmt   = mustRender[tableArgs]("ListTimePartitions", nil)
	defaultPartitionStmt = mustRender[tableArgs]("DefaultPartition", nil)
	tableColumnsStmt     = mustRender[tableArgs]("TableColumns", nil)
	isPartitionedStmt    = mustRender[tableArgs]("IsPartitioned", nil)
	privilegesStmt       = mustRender[privilegeArgs]("MissingPrivileges", fragments)
	setLockTimeoutStmt   = mustRender[sqlfile.NoArgs]("SetLockTimeout", map[string]string{
		"lock_timeout": sqlname.Literal(partitionLockTimeout),
	})
)

// privilegeArgs are the arguments of MissingPrivileges: the quoted
// names of the table and of the tables beside it.
type privilegeArgs struct {
	Table        string `arg:"table"`
	Guard        string `arg:"guard"`
	Partitioning string `arg:"partitioning"`
	Relays       string `arg:"relays"`
	Partitions   string `arg:"partitions"`
}

// mustRender renders a statement when the package is initialized: the
// queries are fixed at build time (TestQueriesRender renders each), so an
// error is a bug of this package.
func mustRender[A any](name string, slots map[string]string) sqlfile.Stmt[A] {
	return sqlfile.MustRender[A](queries, name, slots)
}

// tableSlots returns the slots naming table (optionally schema-qualified)
// and the table beside it that the package's statements name, quoted:
// table and partitioning.
func tableSlots(table string) map[string]string {
	return map[string]string{
		"table":        sqlname.Quote(table),
		"partitioning": sqlname.Beside(table, "_partitioning"),
	}
}

// renderTable renders the query name for table (tableSlots, and the
// pairs of more over them), A's fields as its arguments.
func renderTable[A any](name, table string, more ...string) (sqlfile.Stmt[A], error) {
	s, err := sqlfile.Render[A](queries, name, sqlfile.With(tableSlots(table), more...))
	if err != nil {
		return sqlfile.Stmt[A]{}, fmt.Errorf("render statement: %w", err)
	}
	return s, nil
}

// queryOne runs a statement that returns one row and reads it into a T
// by column name (pgx.RowToStructByName: T's fields are tagged
// `db:"column"`, and a column without a field, or a field without a
// column, is an error). No row is pgx.ErrNoRows, as from QueryRow; rows
// after the first are not read.
func queryOne[T any](ctx context.Context, q Querier, sql string, args ...any) (T, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		var zero T
		return zero, err
	}
	return pgx.CollectOneRow(rows, pgx.RowToStructByName[T])
}

// TableSchema returns the schema of table, wherever the search_path
// found it: a time partition, and adopt's row-check function, go there.
func TableSchema(ctx context.Context, q RowQuerier, table string) (string, error) {
	var schema string
	err := q.QueryRow(ctx, tableSchemaStmt.SQL, tableSchemaStmt.Args(tableArgs{sqlname.Quote(table)})...).Scan(&schema)
	return schema, err
}

// IsPartitioned reports whether table is partitioned (a time-partitioned
// outbox table, or one its owner partitioned).
func IsPartitioned(ctx context.Context, q RowQuerier, table string) (bool, error) {
	var p bool
	err := q.QueryRow(ctx, isPartitionedStmt.SQL, isPartitionedStmt.Args(tableArgs{sqlname.Quote(table)})...).Scan(&p)
	return p, err
}
