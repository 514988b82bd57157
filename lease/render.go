package lease

import (
	"embed"

	"github.com/pgoutbox/outbox/internal/sqlfile"
)

// The Claimer's SQL lives in sql/*.sql, one statement (or one fragment of
// statements) per file, rendered by internal/sqlfile (which says how the
// /* TEMPLATE: name */ slots and the @name arguments work) once per
// Claimer, when New builds its statements: the hot path rewrites nothing.
// statements.go lists the slots and the argument structs.

//go:embed sql/*.sql
var sqlFS embed.FS

// sqlFiles are the Claimer's statement files.
var sqlFiles = sqlfile.NewFiles(sqlFS, "sql")

// noArgs is the argument struct of a statement without arguments.
type noArgs = sqlfile.NoArgs

// stmt is one rendered statement whose $1, $2, ... are the fields of A in
// order.
type stmt[A any] = sqlfile.Stmt[A]

// renderFile returns sql/<name>.sql with its slots filled in (a fragment;
// its @name arguments are bound by the statement it goes into).
func renderFile(name string, slots map[string]string) (string, error) {
	return sqlFiles.Fill(name, slots)
}
