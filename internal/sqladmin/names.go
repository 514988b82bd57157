package sqladmin

import (
	"fmt"
	"regexp"
	"strings"
)

// CheckTableName returns the error sql.MigrateTable gives, before it reads
// the database, for a table name it cannot create: the table's own name
// (without its schema) must be a plain lower-case identifier of at most
// 40 bytes, since the migrations name its indexes, constraints and the
// tables beside it after it. Any existing table's name can be adopted
// instead (sql.AdoptTable). nil for a name sql.MigrateTable accepts.
// outbox-relay run gives it for a missing table that migrate could not
// create.
//
// A schema in the name must be a plain lower-case identifier too: the
// migration history table (<schema>.<name>_schema_migrations) is named
// through goose, which does not quote it.
func CheckTableName(table string) error {
	parts := strings.Split(table, ".")
	if base := parts[len(parts)-1]; !plainName.MatchString(base) {
		return fmt.Errorf("table name %q: migrate names the table's indexes and constraints after it, so it must be a plain lower-case identifier ([a-z_][a-z0-9_]*, at most 40 bytes)", base)
	}
	if len(parts) == 2 && !plainSchema.MatchString(parts[0]) {
		return fmt.Errorf("schema name %q: migrate names the table's migration history <schema>.<name>_schema_migrations unquoted, so the schema must be a plain lower-case identifier ([a-z_][a-z0-9_]*); `outbox-relay adopt` takes a table in any schema", parts[0])
	}
	return nil
}

// plainSchema is a schema name that needs no quotes.
var plainSchema = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// plainName is a table name that can prefix its indexes' and constraints'
// names unquoted, within PostgreSQL's 63-byte limit.
var plainName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,39}$`)
