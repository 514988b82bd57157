package sqladmin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/sqlfile"
	"github.com/pgoutbox/outbox/internal/sqlname"
)

// partitionLockTimeout bounds each wait for a lock while partitions are
// created (ATTACH PARTITION takes SHARE UPDATE EXCLUSIVE on the table,
// ACCESS EXCLUSIVE on its DEFAULT partition): a wait behind a long
// transaction must not queue producers behind it for long. The next round
// tries again.
const partitionLockTimeout = "5s"

// PartitionStorage are the storage parameters every partition of a
// time-partitioned outbox table gets when it is created (a partitioned
// table has no storage and refuses them): those migrations 00001, 00003
// and 00006 give a plain outbox table.
const PartitionStorage = "fillfactor = 40, autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_insert_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.01, vacuum_index_cleanup = on"

// TimePartitioning is what <table>_partitioning records about a table
// partitioned by created_at by sql.MigrateWith (migration 00011).
type TimePartitioning struct {
	// Interval is each partition's span; 0 when pgoutbox does not keep
	// the table's time partitions (a plain table, or a partitioned table
	// whose owner keeps them).
	Interval time.Duration `json:"interval"`
	// Ahead is how many intervals after the current one have their
	// partition.
	Ahead int `json:"ahead"`
}

// ReadTimePartitioning returns table's TimePartitioning (zero when none is
// recorded, or when the table predates migration 00011). Errors are
// wrapped as "time partitions of <table>: ...".
func ReadTimePartitioning(ctx context.Context, q Querier, table string) (TimePartitioning, error) {
	var row timePartitioningRow
	read, err := renderTable[sqlfile.NoArgs]("ReadTimePartitioning", table)
	if err == nil {
		row, err = queryOne[timePartitioningRow](ctx, q, read.SQL)
	}
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return TimePartitioning{}, nil
		}
		return TimePartitioning{}, fmt.Errorf("time partitions of %s: %w", table, err)
	}
	var tp TimePartitioning
	if row.IntervalSeconds != nil {
		tp.Interval = time.Duration(*row.IntervalSeconds) * time.Second
	}
	if row.Ahead != nil {
		tp.Ahead = int(*row.Ahead)
	}
	return tp, nil
}

// timePartitioningRow is the row of ReadTimePartitioning: NULLs when
// pgoutbox does not keep the table's time partitions.
type timePartitioningRow struct {
	IntervalSeconds *int64 `db:"interval_seconds"`
	Ahead           *int32 `db:"ahead"`
}

// TimePartitionName returns the unqualified name of table's partition
// that starts at start: <table>_pYYYYMMDD_HHMM, start in UTC.
func TimePartitionName(table string, start time.Time) string {
	parts := strings.Split(table, ".")
	return parts[len(parts)-1] + "_p" + start.UTC().Format("20060102_1504")
}

// DefaultPartitionName returns the unqualified name of the DEFAULT
// partition sql.MigrateWith gives a time-partitioned table: <table>_default.
func DefaultPartitionName(table string) string {
	parts := strings.Split(table, ".")
	return parts[len(parts)-1] + "_default"
}

// EnsureTimePartitions creates the partitions of table that its
// TimePartitioning asks for and that are missing: the one holding the
// database's now() and the Ahead after it. On a table without
// TimePartitioning it does nothing. It is idempotent and safe from several
// processes at once (CreateTimePartitions). It returns the names of the
// partitions it created.
func EnsureTimePartitions(ctx context.Context, pool *pgxpool.Pool, table string) ([]string, error) {
	tp, err := ReadTimePartitioning(ctx, pool, table)
	if err != nil || tp.Interval == 0 {
		return nil, err
	}
	var now time.Time
	if err := pool.QueryRow(ctx, nowStmt.SQL).Scan(&now); err != nil {
		return nil, fmt.Errorf("time partitions of %s: %w", table, err)
	}
	// The partition holding now + Ahead intervals, even when that is
	// exactly its start.
	return CreateTimePartitions(ctx, pool, table, now, now.Add(time.Duration(tp.Ahead)*tp.Interval+time.Second))
}

// CreateTimePartitions creates the missing partitions of table that cover
// [from, to): one per TimePartitioning.Interval, aligned to multiples of it
// since the Unix epoch, named by TimePartitionName, with PartitionStorage.
// Each is created as a table of its own (CREATE TABLE ... (LIKE table
// INCLUDING DEFAULTS INCLUDING CONSTRAINTS)) and attached, which locks
// table in SHARE UPDATE EXCLUSIVE mode only: producers and relays go on
// meanwhile (CREATE TABLE ... PARTITION OF would take ACCESS EXCLUSIVE).
// The table's indexes and row triggers are given to each partition by
// PostgreSQL when it is attached. Partitions of one table are created
// under one advisory lock (sqlname.LockTimePartitions) and with
// lock_timeout 5s. The role needs to own table and to have CREATE on its
// schema. It returns the names of the partitions it created. A table
// without TimePartitioning is an error.
func CreateTimePartitions(ctx context.Context, pool *pgxpool.Pool, table string, from, to time.Time) ([]string, error) {
	wrap := func(err error) error { return fmt.Errorf("create time partitions of %s: %w", table, err) }
	tp, err := ReadTimePartitioning(ctx, pool, table)
	if err != nil {
		return nil, err
	}
	if tp.Interval == 0 {
		return nil, wrap(fmt.Errorf("the table is not time-partitioned by pgoutbox (outbox-relay migrate --time-partitioned)"))
	}
	t := sqlname.Quote(table)
	lock, err := renderTable[sqlfile.NoArgs]("LockTimePartitions", table, "lock", sqlname.XactLock(sqlname.LockTimePartitions, table))
	if err != nil {
		return nil, wrap(err)
	}
	var created []string
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, setLockTimeoutStmt.SQL); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, lock.SQL); err != nil {
			return err
		}
		schema, err := TableSchema(ctx, tx, table)
		if err != nil {
			return err
		}
		have := map[string]bool{}
		rows, err := tx.Query(ctx, childPartitionsStmt.SQL, childPartitionsStmt.Args(tableArgs{t})...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				return err
			}
			have[n] = true
		}
		if err := rows.Err(); err != nil {
			return err
		}
		iv := int64(tp.Interval / time.Second)
		start := time.Unix(from.Unix()/iv*iv, 0).UTC()
		if from.Unix() < 0 && from.Unix()%iv != 0 {
			start = start.Add(-tp.Interval)
		}
		for ; start.Before(to); start = start.Add(tp.Interval) {
			name := TimePartitionName(table, start)
			if have[name] {
				continue
			}
			lit := func(ts time.Time) string { return sqlname.Literal(ts.UTC().Format("2006-01-02 15:04:05+00")) }
			for _, q := range []string{"CreateTimePartition", "AttachTimePartition"} {
				st, err := renderTable[sqlfile.NoArgs](q, table, "partition", pgx.Identifier{schema, name}.Sanitize(), "storage", PartitionStorage,
					"from", lit(start), "to", lit(start.Add(tp.Interval)))
				if err != nil {
					return fmt.Errorf("partition %s: %w", name, err)
				}
				if _, err := tx.Exec(ctx, st.SQL); err != nil {
					return fmt.Errorf("partition %s: %w", name, err)
				}
			}
			created = append(created, name)
		}
		return nil
	})
	if err != nil {
		return nil, wrap(err)
	}
	return created, nil
}

// TimePartition is one partition of a table partitioned by range of
// created_at, as ListTimePartitions reads it from the catalog.
type TimePartition struct {
	// Name is the partition, schema-qualified and quoted as regclass
	// prints it.
	Name string
	// From and To are its bounds, [From, To); zero for the DEFAULT
	// partition and for MINVALUE / MAXVALUE.
	From, To time.Time
	// Default is true for the DEFAULT partition.
	Default bool
	// Unlogged is true for an UNLOGGED partition.
	Unlogged bool
}

// ListTimePartitions returns the leaf partitions of table in the order of
// their bounds (the DEFAULT partition last); none for a plain table.
// Errors are wrapped as "partitions of <table>: ...".
func ListTimePartitions(ctx context.Context, q Querier, table string) ([]TimePartition, error) {
	rows, err := q.Query(ctx, listPartitionsStmt.SQL, listPartitionsStmt.Args(tableArgs{sqlname.Quote(table)})...)
	if err != nil {
		return nil, fmt.Errorf("partitions of %s: %w", table, err)
	}
	listed, err := pgx.CollectRows(rows, pgx.RowToStructByName[listedPartition])
	if err != nil {
		return nil, fmt.Errorf("partitions of %s: %w", table, err)
	}
	var out []TimePartition
	for _, l := range listed {
		p := TimePartition{Name: l.Name, Unlogged: l.Unlogged, Default: l.Default}
		if l.From != nil {
			p.From = *l.From
		}
		if l.To != nil {
			p.To = *l.To
		}
		out = append(out, p)
	}
	return out, nil
}

// listedPartition is a row of ListTimePartitions: its bounds are NULL for
// the DEFAULT partition, MINVALUE and MAXVALUE.
type listedPartition struct {
	Name     string     `db:"name"`
	Unlogged bool       `db:"unlogged"`
	Default  bool       `db:"is_default"`
	From     *time.Time `db:"from_time"`
	To       *time.Time `db:"to_time"`
}
