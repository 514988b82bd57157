package claim

import (
	"embed"

	"github.com/pgoutbox/outbox/internal/sqlfile"
)

// The Claimer's SQL lives in sql/*.sql, named queries grouped by concern
// (claim.sql, settle.sql, guard.sql, membership.sql), rendered by
// internal/sqlfile (which says how the /* TEMPLATE: name */ slots and the
// @name arguments work) once per Claimer, when New builds its statements:
// the hot path rewrites nothing. statements.go lists the slots and the
// argument structs.

//go:embed sql/*.sql
var sqlFS embed.FS

// queries are the Claimer's named queries.
var queries = sqlfile.MustLoad(sqlFS, "sql")
