package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/google/uuid"

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
			ids = append(ids, s)
		}
	}
	pool, cols, err := connectForCommand(ctx, &common, &tbl)
	if err != nil {
		return err
	}
	defer pool.Close()
	c, err := lease.New(pool, lease.Config{Table: tbl.table, Columns: cols})
	if err != nil {
		return usageError{errors.New(flagError(err))}
	}
	n, err := c.Requeue(ctx, ids)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "requeued %d dead-lettered event(s)\n", n)
	if len(ids) > 0 && n < int64(len(ids)) {
		return fmt.Errorf("%d of %d event IDs are not dead letters (unknown, published, or not dead-lettered)", int64(len(ids))-n, len(ids))
	}
	return nil
}
