package relay

import (
	"embed"

	"github.com/pgoutbox/outbox/internal/sqlfile"
	"github.com/pgoutbox/outbox/internal/sqlname"
)

// The relay's own SQL (its sessions' settings and the start-up check of
// the table; claiming and marking are lease's) lives in sql/session.sql,
// named queries rendered by internal/sqlfile.

//go:embed sql/*.sql
var sqlFS embed.FS

// queries are the relay's named queries.
var queries = sqlfile.MustLoad(sqlFS, "sql")

// poolSettingsArgs: DBTimeoutMS is Config.DBTimeout in milliseconds, as
// text (the statement is sent with the simple protocol).
type poolSettingsArgs struct {
	DBTimeoutMS string `arg:"db_timeout_ms"`
}

// The statements that take nothing from a Config, rendered once; a broken
// file fails every test of the package (TestStatementsRender).
var (
	poolSettings     = sqlfile.MustRender[poolSettingsArgs](queries, "PoolSettings", nil)
	listenerSettings = sqlfile.MustRender[sqlfile.NoArgs](queries, "ListenerSettings", nil)
)

// checkTableSQL renders CheckTable for table.
func checkTableSQL(table string) (string, error) {
	s, err := sqlfile.Render[sqlfile.NoArgs](queries, "CheckTable", map[string]string{"table": sqlname.Quote(table)})
	return s.SQL, err
}
