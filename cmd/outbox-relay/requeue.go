package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/lease"
)

// cmdRequeue puts dead-lettered events back, on the table the relay reads
// (the same --table, --debezium and --column-* flags).
func cmdRequeue(ctx context.Context, args []string, stdout, _ io.Writer) error {
	fs := newFlagSet("requeue", stdout)
	var common commonFlags
	var tbl tableFlags
	common.register(fs)
	tbl.register(fs, "")
	eventIDs := fs.String("event-id", "", "dead-lettered event(s) to requeue: one ID or a comma-separated list")
	all := fs.Bool("all-dead-letters", false, "requeue every dead-lettered event")
	if err := parse(fs, args); err != nil {
		return err
	}
	if (*eventIDs == "") == !*all {
		return usagef("--event-id or --all-dead-letters: give exactly one")
	}
	var ids []string
	if *eventIDs != "" {
		for _, s := range strings.Split(*eventIDs, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				return usagef("--event-id: an empty ID in %q", *eventIDs)
			}
			// The ID column may be uuid, text or bigint (adopted tables);
			// a UUID is compared in PostgreSQL's canonical text form.
			if id, err := uuid.Parse(s); err == nil {
				s = id.String()
			}
			// An ID given twice is requeued, and counted, once.
			if !slices.Contains(ids, s) {
				ids = append(ids, s)
			}
		}
	}
	pool, cols, err := connectForCommand(ctx, &common, &tbl)
	if err != nil {
		return err
	}
	defer pool.Close()
	c, err := claim.New(pool, lease.Config{Table: tbl.table, Columns: cols})
	if err != nil {
		return usageError{errors.New(flagError(err))}
	}
	n, err := c.Requeue(ctx, ids)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "requeued %d dead-lettered event(s)\n", n)
	if len(ids) > 0 && n < int64(len(ids)) {
		msg := fmt.Sprintf("%d of %d event IDs are not dead letters (unknown, published, or not dead-lettered)", int64(len(ids))-n, len(ids))
		if bad, idType := idsNotOfType(ctx, pool, &tbl, cols, ids); len(bad) > 0 {
			msg += fmt.Sprintf("; not a %s, the type of the ID column %s: %s", idType, cols.ID, strings.Join(bad, ", "))
		}
		return errors.New(msg)
	}
	return nil
}

// idsNotOfType returns the IDs of ids that cannot be values of the ID
// column (a UUID column, an integer column), with the column's type, so
// that requeue says why they matched nothing, as inspect does. Nothing
// when the type cannot be read.
func idsNotOfType(ctx context.Context, pool *pgxpool.Pool, tbl *tableFlags, cols lease.Columns, ids []string) ([]string, string) {
	st, err := newInspectStatements(tbl.table, cols)
	if err != nil {
		return nil, ""
	}
	var idType string
	if err := pool.QueryRow(ctx, st.idColumnType.SQL, st.idColumnType.Args(idColumnTypeArgs{Table: outbox.TableIdentifier(tbl.table), Column: cols.ID})...).Scan(&idType); err != nil {
		return nil, ""
	}
	var bad []string
	for _, id := range ids {
		var err error
		switch idType {
		case "uuid":
			_, err = uuid.Parse(id)
		case "bigint", "integer", "smallint":
			_, err = strconv.ParseInt(id, 10, 64)
		}
		if err != nil {
			bad = append(bad, id)
		}
	}
	return bad, idType
}
