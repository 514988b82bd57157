package main

import (
	"context"
	"fmt"
	"io"

	outboxsql "github.com/pgoutbox/outbox/sql"
)

// cmdGrants prints the GRANT script that gives --role every privilege the
// relay needs on --table (and, with --writer-role, what the writers need),
// for a DBA to run as the table's owner. It connects to nothing.
func cmdGrants(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := newFlagSet("grants", stdout)
	var tbl tableFlags
	tbl.registerTable(fs)
	role := fs.String("role", "", "the relay's role (required)")
	writer := fs.String("writer-role", "", "also grant what writers need (INSERT) to this role")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *role == "" {
		return usagef("--role: required: the role the relay connects as, e.g. --role relay")
	}
	fmt.Fprint(stdout, outboxsql.GrantScript(*role, tbl.table, *writer))
	return nil
}
