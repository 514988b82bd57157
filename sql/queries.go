package sql

import (
	"embed"
	"fmt"

	"github.com/pgoutbox/outbox/internal/sqlfile"
	"github.com/pgoutbox/outbox/internal/sqlname"
)

// The package's SQL, but for the migrations (migrations/*.sql, which goose
// applies), lives in queries/*.sql, one statement (or one fragment of
// statements) per file, explained by its own comments, rendered by
// internal/sqlfile (which says how the /* TEMPLATE: name */ slots and the
// @name arguments work). The statements that name no table in their text
// (they take it as an argument, @table) are rendered once, when the
// package is initialized; those that do (FROM <table>_partitioning, DDL
// on the table) are rendered at each call with tableSlots, as none is on a
// hot path.

//go:embed queries/*.sql
var queryFS embed.FS

// queries are the package's statement files.
var queries = sqlfile.NewFiles(queryFS, "queries")

// noArgs is the argument struct of a statement without arguments.
type noArgs = sqlfile.NoArgs

// stmt is one rendered statement whose $1, $2, ... are the fields of A in
// order.
type stmt[A any] = sqlfile.Stmt[A]

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

// fragments are the fragment files the catalog statements fill in:
// seq_of (the sequence of the seq column of the table c) and
// unlogged_partition (the first unlogged partition of the table c).
var fragments = map[string]string{
	"seq_of":             mustFill("seq_of", nil),
	"unlogged_partition": mustFill("unlogged_partition", nil),
}

// The statements rendered once (see above).
var (
	relkindStmt             = mustRender[tableArgs]("relkind", nil)
	foreignTableStmt        = mustRender[tableArgs]("foreign_table", nil)
	missingColumnsStmt      = mustRender[columnsArgs]("missing_columns", nil)
	byCreatedAtStmt         = mustRender[tableArgs]("partitioned_by_created_at", nil)
	hasDefaultPartitionStmt = mustRender[tableArgs]("has_default_partition", nil)
	schemaExistsStmt        = mustRender[schemaArgs]("schema_exists", nil)
	currentSchemaStmt       = mustRender[noArgs]("current_schema", nil)
	durabilityStmt          = mustRender[tableArgs]("durability", fragments)
	sequenceOfStmt          = mustRender[tableArgs]("sequence_of", fragments)
	inspectTableStmt        = mustRender[tableArgs]("inspect_table", fragments)
	replicaIdentityStmt     = mustRender[tableArgs]("replica_identity", nil)
	publicationsStmt        = mustRender[tableArgs]("publications", nil)
	isPartitionedStmt       = mustRender[tableArgs]("is_partitioned", nil)
	nowStmt                 = mustRender[noArgs]("now", nil)
	tableSchemaStmt         = mustRender[tableArgs]("table_schema", nil)
	childPartitionsStmt     = mustRender[tableArgs]("child_partitions", nil)
	listPartitionsStmt      = mustRender[tableArgs]("list_time_partitions", nil)
	eventTypeColumnStmt     = mustRender[tableArgs]("event_type_column", nil)
	columnCompressionStmt   = mustRender[noArgs]("column_compression", nil)
	adoptTableShapeStmt     = mustRender[tableArgs]("adopt_table_shape", nil)
	privilegesStmt          = mustRender[privilegeArgs]("missing_privileges", fragments)
	setLockTimeoutStmt      = mustRender[noArgs]("set_lock_timeout", map[string]string{
		"lock_timeout": sqlname.Literal(partitionLockTimeout),
	})
)

// schemaArgs are the arguments of schema_exists.sql.
type schemaArgs struct {
	Schema string `arg:"schema"`
}

// privilegeArgs are the arguments of missing_privileges.sql: the quoted
// names of the table and of the tables beside it.
type privilegeArgs struct {
	Table        string `arg:"table"`
	Guard        string `arg:"guard"`
	Partitioning string `arg:"partitioning"`
	Relays       string `arg:"relays"`
	Partitions   string `arg:"partitions"`
}

// mustRender renders a statement when the package is initialized: the
// files are fixed at build time (TestQueriesRender renders each), so an
// error is a bug of this package.
func mustRender[A any](name string, slots map[string]string) stmt[A] {
	return sqlfile.MustRender[A](queries, name, slots)
}

// mustFill is mustRender for a fragment, or a statement that pgoutbox
// does not run (GrantScript's): queries/<name>.sql with its slots filled.
func mustFill(name string, slots map[string]string) string {
	s, err := queries.Fill(name, slots)
	if err != nil {
		panic(err)
	}
	return s
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

// with returns slots and, over them, the pairs of more (name, value, name,
// value, ...), in a new map.
func with(slots map[string]string, more ...string) map[string]string {
	out := make(map[string]string, len(slots)+len(more)/2)
	for k, v := range slots {
		out[k] = v
	}
	for i := 0; i+1 < len(more); i += 2 {
		out[more[i]] = more[i+1]
	}
	return out
}

// renderTable renders queries/<name>.sql for table (tableSlots, and the
// pairs of more over them), A's fields as its arguments.
func renderTable[A any](name, table string, more ...string) (stmt[A], error) {
	s, err := sqlfile.Render[A](queries, name, with(tableSlots(table), more...))
	if err != nil {
		return stmt[A]{}, fmt.Errorf("render statement: %w", err)
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

// add renders queries/<name>.sql, with the pairs of more over the
// script's slots.
func (s *script) add(name string, more ...string) {
	if s.failed != nil {
		return
	}
	st, err := sqlfile.Render[noArgs](queries, name, with(s.slots, more...))
	s.stmts, s.failed = append(s.stmts, st.SQL), err
}

// err is the first error, if any, wrapped as "render statement: ...".
func (s *script) err() error {
	if s.failed != nil {
		return fmt.Errorf("render statement: %w", s.failed)
	}
	return nil
}
