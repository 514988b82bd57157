package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/lease"
)

func cmdRequeue(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("requeue", stderr)
	var common commonFlags
	common.register(fs)
	eventIDs := fs.String("event-id", "", "dead-lettered event(s) to requeue: one ID or a comma-separated list")
	all := fs.Bool("all-dead-letters", false, "requeue every dead-lettered event")
	if err := parse(fs, args); err != nil {
		return err
	}
	if (*eventIDs == "") == !*all {
		return usagef("--event-id or --all-dead-letters: give exactly one")
	}
	var ids []uuid.UUID
	if *eventIDs != "" {
		for _, s := range strings.Split(*eventIDs, ",") {
			id, err := uuid.Parse(strings.TrimSpace(s))
			if err != nil {
				return usagef("--event-id: %q is not a UUID", s)
			}
			ids = append(ids, id)
		}
	}
	pcfg, err := common.poolConfig()
	if err != nil {
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	if err := checkTable(ctx, pool, common.table); err != nil {
		return err
	}
	c, err := lease.New(pool, lease.Config{Table: common.table})
	if err != nil {
		return usageError{err}
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
