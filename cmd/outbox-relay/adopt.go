package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/lease"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

// columnFlags map an existing outbox table's columns (for example a Debezium
// outbox table's) onto the event's fields.
type columnFlags struct {
	debezium bool
	cols     lease.Columns
}

func (c *columnFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&c.debezium, "debezium", false, "the table is a Debezium outbox table: columns id, aggregatetype, aggregateid, type, payload (sets the --column-* defaults)")
	fs.StringVar(&c.cols.ID, "column-id", "", "event ID column, uuid (default id)")
	fs.StringVar(&c.cols.AggregateID, "column-aggregate-id", "", "aggregate ID column, the Kafka key (default aggregate_id; Debezium aggregateid)")
	fs.StringVar(&c.cols.EventType, "column-event-type", "", "event type column (default event_type; Debezium type)")
	fs.StringVar(&c.cols.Payload, "column-payload", "", "payload column, jsonb or text (default payload)")
	fs.StringVar(&c.cols.AggregateType, "column-aggregate-type", "", "column that --topic-template routes by (Debezium aggregatetype)")
}

// columns returns the mapping with --debezium's defaults under the
// explicit --column-* flags.
func (c *columnFlags) columns() lease.Columns {
	cols := c.cols
	if c.debezium {
		d := lease.DebeziumColumns
		for _, p := range []struct {
			dst *string
			def string
		}{
			{&cols.ID, d.ID}, {&cols.AggregateID, d.AggregateID}, {&cols.EventType, d.EventType},
			{&cols.Payload, d.Payload}, {&cols.AggregateType, d.AggregateType},
		} {
			if *p.dst == "" {
				*p.dst = p.def
			}
		}
	}
	return cols
}

// cmdAdopt prepares an existing outbox table (typically Debezium's) for the
// relay, leaving its producers untouched.
func cmdAdopt(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("adopt", stderr)
	var common commonFlags
	var cf columnFlags
	common.register(fs)
	cf.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	pcfg, err := common.poolConfig()
	if err != nil {
		return err
	}
	if common.table == "outbox" && !cf.debezium {
		return usagef("--table: name the existing table to adopt (the outbox table itself is created by `outbox-relay migrate`)")
	}
	cols := cf.columns()
	agg := cols.AggregateID
	if agg == "" {
		agg = "aggregate_id"
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	if err := outboxsql.Adopt(ctx, pool, common.table, agg); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "table %s is ready for outbox-relay (run it with --table %s", common.table, common.table)
	if cf.debezium {
		fmt.Fprint(stdout, " --debezium")
	}
	fmt.Fprintln(stdout, ")")
	return nil
}
