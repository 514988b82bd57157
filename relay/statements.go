package relay

import (
	"embed"

	"github.com/pgoutbox/outbox/internal/sqlfile"
	"github.com/pgoutbox/outbox/internal/sqlname"
)

// The relay's own SQL (its sessions' settings and the start-up check of
// the table; claiming and marking are lease's) lives in sql/*.sql,
// rendered by internal/sqlfile.

//go:embed sql/*.sql
var sqlFS embed.FS

var sqlFiles = sqlfile.NewFiles(sqlFS, "sql")

// poolSettingsArgs: DBTimeoutMS is Config.DBTimeout in milliseconds, as
// text (the statement is sent with the simple protocol).
type poolSettingsArgs struct {
	DBTimeoutMS string `arg:"db_timeout_ms"`
}

// The statements that take nothing from a Config, rendered once; a broken
// file fails every test of the package (TestStatementsRender).
var (
	poolSettings     = sqlfile.MustRender[poolSettingsArgs](sqlFiles, "pool_settings", nil)
	listenerSettings = sqlfile.MustRender[sqlfile.NoArgs](sqlFiles, "listener_settings", nil)
)

// checkTableSQL renders sql/check_table.sql for table.
func checkTableSQL(table string) (string, error) {
	s, err := sqlfile.Render[sqlfile.NoArgs](sqlFiles, "check_table", map[string]string{"table": sqlname.Quote(table)})
	return s.SQL, err
}
