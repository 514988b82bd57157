package sql

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/sqlfile"
	"github.com/pgoutbox/outbox/internal/sqlname"
)

// backfillBatch is how many rows one backfill statement fills in: each is
// its own transaction of a few milliseconds, so writers and relays are
// never held up behind it.
const backfillBatch = 1000

// backfillKeyPartitions fills in key_partition for the unpublished rows
// that predate migration 00009 (aggregateColumn holds their aggregate ID),
// in batches, and records in <table>_partitioning that it is done. Rows
// inserted meanwhile get theirs from the trigger. A table already done is
// left alone.
func backfillKeyPartitions(ctx context.Context, pool *pgxpool.Pool, table, aggregateColumn string) error {
	st := newScript(tableSlots(table))
	st.add("Backfilled")
	st.add("MarkBackfilled")
	if err := st.err(); err != nil {
		return fmt.Errorf("migrate: key partitions: %w", err)
	}
	backfilled, mark := st.stmts[0], st.stmts[1]
	var done bool
	if err := pool.QueryRow(ctx, backfilled).Scan(&done); err != nil {
		return fmt.Errorf("migrate: key partitions: %w", err)
	}
	if done {
		return nil
	}
	var partitioned bool
	if err := pool.QueryRow(ctx, isPartitionedStmt.SQL, isPartitionedStmt.Args(tableArgs{sqlname.Quote(table)})...).Scan(&partitioned); err != nil {
		return fmt.Errorf("migrate: key partitions: %w", err)
	}
	// In seq order from where the last batch ended; on a partitioned table
	// rows are named by partition and ctid (see the files).
	name := "BackfillKeyPartitions"
	if partitioned {
		name = "BackfillKeyPartitionsPartitioned"
	}
	fill, err := renderTable[backfillArgs](name, table, "aggregate", sqlname.Column(aggregateColumn), "batch_size", strconv.Itoa(backfillBatch))
	if err != nil {
		return fmt.Errorf("migrate: key partitions: %w", err)
	}
	for last := int64(-1); ; {
		var next *int64
		if err := pool.QueryRow(ctx, fill.SQL, fill.Args(backfillArgs{last})...).Scan(&next); err != nil {
			return fmt.Errorf("migrate: fill in key partitions: %w", err)
		}
		if next == nil {
			break
		}
		last = *next
	}
	if _, err := pool.Exec(ctx, mark); err != nil {
		return fmt.Errorf("migrate: key partitions: %w", err)
	}
	return nil
}

// backfillArgs are the arguments of BackfillKeyPartitions: the seq
// the batch starts after.
type backfillArgs struct {
	After int64 `arg:"after"`
}

// checkPartitions returns an error when opts asks for a number of key
// partitions other than the table's.
func checkPartitions(ctx context.Context, pool *pgxpool.Pool, opts MigrateOptions) error {
	if opts.Partitions == 0 {
		return nil
	}
	count, err := renderTable[sqlfile.NoArgs]("PartitionCount", opts.Table)
	if err != nil {
		return fmt.Errorf("migrate: key partitions: %w", err)
	}
	var n int
	if err := pool.QueryRow(ctx, count.SQL).Scan(&n); err != nil {
		return fmt.Errorf("migrate: key partitions: %w", err)
	}
	if n != opts.Partitions {
		return fmt.Errorf("migrate: table %s has %d key partitions, fixed when it was migrated to key partitions (migration 9); it cannot change to %d", opts.Table, n, opts.Partitions)
	}
	return nil
}

// keyPartitionStatements returns what migrations 00009 and 00010 do, for
// an adopted table whose aggregate ID is in aggregateColumn and payload in
// payloadColumn: the key_partition and payload_size columns, the function
// and the insert trigger that fill them in, and the tables of the relays
// and the partitions' owners (queries/partitions.sql, AdoptKeyPartitionColumns
// to CreateKeyPartitionTrigger). compression says the server has pg_column_compression
// (PostgreSQL 14+; see payloadSizeExpr). It is idempotent (an adopted
// table keeps its partition count).
func keyPartitionStatements(table, aggregateColumn, payloadColumn string, partitions int, compression bool) ([]string, error) {
	size, err := payloadSizeExpr(payloadColumn, compression)
	if err != nil {
		return nil, err
	}
	// The trigger function's body is a format() string (%s: the number of
	// partitions), in a literal: every '%' of the names in it doubled.
	body, err := queries.Fill("KeyPartitionTriggerBody", map[string]string{
		"aggregate":    strings.ReplaceAll(sqlname.Column(aggregateColumn), "%", "%%"),
		"payload_size": strings.ReplaceAll(size, "%", "%%"),
	})
	if err != nil {
		return nil, fmt.Errorf("render statement: %w", err)
	}
	slots := sqlfile.With(tableSlots(table),
		"trigger", sqlname.Column(constraintName(tableName(table), "_key_partition_fill")),
		"partition_count", strconv.Itoa(partitions),
		"set_key_partition_body", sqlname.Literal(body))
	slots = sqlfile.With(slots,
		"key_partition_fn_literal", sqlname.Literal(slots["key_partition_fn"]),
		"set_key_partition_fn_literal", sqlname.Literal(slots["set_key_partition_fn"]))
	slots["do_tag"] = dollarTag("adopt", slots)
	st := newScript(slots)
	for _, name := range []string{
		"AdoptKeyPartitionColumns",
		"AdoptPartitioningTable",
		"AdoptPartitioningTimeColumns",
		"AdoptPartitioningRow",
		"AdoptRelaysTable",
		"AdoptPartitionsTable",
		"AdoptPartitionsRows",
		"AdoptKeyPartitionFunctions",
		"DropTrigger",
		"CreateKeyPartitionTrigger",
	} {
		st.add(name)
	}
	return st.stmts, st.err()
}

// payloadSizeExpr is the size migration 00010's trigger writes to
// payload_size, for the payload column column of the new row
// (PayloadSizeCompressed; without compression, on
// PostgreSQL 13, PayloadSize).
func payloadSizeExpr(column string, compression bool) (string, error) {
	name := "PayloadSize"
	if compression {
		name = "PayloadSizeCompressed"
	}
	s, err := queries.Fill(name, map[string]string{"payload": sqlname.Column(column)})
	if err != nil {
		return "", fmt.Errorf("render statement: %w", err)
	}
	return s, nil
}

// dollarTag returns a dollar quote, $<base>$ or $<base><n>$, that none of
// slots' values holds, for a block of SQL that they are rendered into: a
// quoted name may hold any text, "$adopt$" too.
func dollarTag(base string, slots map[string]string) string {
	for n := 0; ; n++ {
		tag := "$" + base + "$"
		if n > 0 {
			tag = "$" + base + strconv.Itoa(n) + "$"
		}
		clash := false
		for _, v := range slots {
			if strings.Contains(v, tag) {
				clash = true
				break
			}
		}
		if !clash {
			return tag
		}
	}
}
