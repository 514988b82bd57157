package main

import (
	"context"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/sqladmin"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

// cmdAdopt prepares an existing outbox table (typically Debezium's) for the
// relay, leaving its producers untouched, and reports what a Debezium
// installation may have left: logical replication slots (with the WAL they
// keep) and publications covering the table. A table the relay cannot run
// on (UNLOGGED, or UPDATEs failing for want of a replica identity) is
// refused, exit 1, naming the fix.
func cmdAdopt(ctx context.Context, args []string, stdout, _ io.Writer) error {
	fs := newFlagSet("adopt", stdout)
	var common commonFlags
	var tbl tableFlags
	common.register(fs)
	tbl.register(fs, "")
	from, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	pcfg, err := common.poolConfig()
	if err != nil {
		return err
	}
	// The default table is the one migrate creates: adopt takes a table
	// only when it is named (a Debezium table called outbox too).
	if from["table"] == "" {
		return usagef("--table: name the existing table to adopt, e.g. --table outboxevent (the outbox table itself is created by `outbox-relay migrate`)")
	}
	cols := tbl.columns()
	agg := cols.AggregateID
	if agg == "" {
		agg = "aggregate_id"
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	if err := outboxsql.AdoptWith(ctx, pool, tbl.table, outboxsql.AdoptColumns{AggregateID: agg, EventType: cols.EventType, Payload: cols.Payload}); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "table %s is ready for outbox-relay (give run, status, inspect and requeue %s)\n", tbl.table, tbl.flags())
	count, err := renderUnpublishedCount(tbl.table)
	if err != nil {
		return err
	}
	var unpublished int64
	if err := pool.QueryRow(ctx, count.SQL).Scan(&unpublished); err != nil {
		return fmt.Errorf("count unpublished rows: %w", err)
	}
	if unpublished > 0 {
		// A switch from Debezium: its connector published these already.
		fmt.Fprintf(stdout, "note: %d rows already in the table are unpublished: the relay publishes them when it starts; if another relay (e.g. Debezium) published them already, mark them published first (docs/operating.md, \"Rows already in an adopted table\")\n", unpublished)
	}
	r, err := sqladmin.Inspect(ctx, pool, tbl.table)
	if err != nil {
		return err
	}
	for _, p := range r.Problems() {
		fmt.Fprintf(stdout, "warning: %v\n", p)
	}
	writeLeftovers(stdout, r)
	return nil
}
