package sql

import (
	"embed"
	"fmt"

	"github.com/pgoutbox/outbox/internal/sqlfile"
	"github.com/pgoutbox/outbox/internal/sqlname"
)

// The package's SQL, but for the migrations (migrations/*.sql, which goose
// applies), lives in queries/*.sql, named queries grouped by concern
// (catalog.sql, adopt.sql, partitions.sql, grants.sql), each
// explained by its own comments, rendered by internal/sqlfile (which says
// how the /* TEMPLATE: name */ slots and the @name arguments work). The
// statements that name no table in their text (they take it as an
// argument, @table) are rendered once, when the package is initialized;
// those that do (FROM <table>_partitioning, DDL on the table) are rendered
// at each call with tableSlots, as none is on a hot path.

//go:embed queries/*.sql
var queryFS embed.FS

// queries are the package's named queries.
var queries = sqlfile.MustLoad(queryFS, "queries")

// tableArgs are the arguments of a statement on one table, @table: its
// quoted name (sqlname.Quote), which the statement reads as regclass.
type tableArgs struct {
	Table string `arg:"table"`
}

// columnsArgs are a quoted table and column names.
type columnsArgs struct {
	Table   string   `arg:"table"`
	Columns []string `arg:"columns"`
}

// The statements rendered once (see above).
var (
	relkindStmt             = mustRender[tableArgs]("Relkind", nil)
	foreignTableStmt        = mustRender[tableArgs]("ForeignTable", nil)
	missingColumnsStmt      = mustRender[columnsArgs]("MissingColumns", nil)
	byCreatedAtStmt         = mustRender[tableArgs]("PartitionedByCreatedAt", nil)
	hasDefaultPartitionStmt = mustRender[tableArgs]("HasDefaultPartition", nil)
	schemaExistsStmt        = mustRender[schemaArgs]("SchemaExists", nil)
	currentSchemaStmt       = mustRender[sqlfile.NoArgs]("CurrentSchema", nil)
	isPartitionedStmt       = mustRender[tableArgs]("IsPartitioned", nil)
	eventTypeColumnStmt     = mustRender[tableArgs]("EventTypeColumn", nil)
	columnCompressionStmt   = mustRender[sqlfile.NoArgs]("ColumnCompression", nil)
	adoptTableShapeStmt     = mustRender[tableArgs]("AdoptTableShape", nil)
)

// schemaArgs are the arguments of SchemaExists.
type schemaArgs struct {
	Schema string `arg:"schema"`
}

// mustRender renders a statement when the package is initialized: the
// queries are fixed at build time (TestQueriesRender renders each), so an
// error is a bug of this package.
func mustRender[A any](name string, slots map[string]string) sqlfile.Stmt[A] {
	return sqlfile.MustRender[A](queries, name, slots)
}

// tableSlots returns the slots naming table (optionally schema-qualified)
// and the objects beside it, quoted: table, table_literal (the quoted name
// as a string literal, for regclass), guard (the order guard),
// partitioning, relays, partitions, key_partition_fn and
// set_key_partition_fn (migration 00009's).
func tableSlots(table string) map[string]string {
	return map[string]string{
		"table":                sqlname.Quote(table),
		"table_literal":        sqlname.Literal(sqlname.Quote(table)),
		"guard":                sqlname.OrderGuard(table),
		"partitioning":         sqlname.Beside(table, "_partitioning"),
		"relays":               sqlname.Beside(table, "_relays"),
		"partitions":           sqlname.Beside(table, "_partitions"),
		"key_partition_fn":     sqlname.Beside(table, "_key_partition"),
		"set_key_partition_fn": sqlname.Beside(table, "_set_key_partition"),
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

// script renders statements without arguments, in order, keeping the
// first error: a caller adds them all, then checks err.
type script struct {
	slots  map[string]string
	stmts  []string
	failed error
}

// newScript returns a script rendering with slots.
func newScript(slots map[string]string) *script { return &script{slots: slots} }

// add renders the query name, with the pairs of more over the
// script's slots.
func (s *script) add(name string, more ...string) {
	if s.failed != nil {
		return
	}
	st, err := sqlfile.Render[sqlfile.NoArgs](queries, name, sqlfile.With(s.slots, more...))
	s.stmts, s.failed = append(s.stmts, st.SQL), err
}

// err is the first error, if any, wrapped as "render statement: ...".
func (s *script) err() error {
	if s.failed != nil {
		return fmt.Errorf("render statement: %w", s.failed)
	}
	return nil
}
