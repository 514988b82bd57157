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

// DefaultPartition returns table's DEFAULT partition as regclass prints
// it, "" when it has none (a plain table has none).
func DefaultPartition(ctx context.Context, q RowQuerier, table string) (string, error) {
	var def string
	err := q.QueryRow(ctx, defaultPartitionStmt.SQL, defaultPartitionStmt.Args(tableArgs{sqlname.Quote(table)})...).Scan(&def)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return def, err
}

// EnsureTimePartitions creates the partitions of table that its
// TimePartitioning asks for and that are missing: the one holding the
// database's now() and the Ahead after it. On a table without
// TimePartitioning it does nothing. It is idempotent and safe from several
// processes at once (CreateTimePartitions). It returns the names of the
// partitions it created, and a *PartitionsError naming those it could not
// create.
func EnsureTimePartitions(ctx context.Context, pool *pgxpool.Pool, table string) ([]string, error) {
	var created []string
	var failed *PartitionsError
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		created, err = EnsureTimePartitionsTx(ctx, tx, table)
		if errors.As(err, &failed) {
			return nil // the others commit
		}
		return err
	})
	switch {
	case err != nil:
		return nil, err
	case failed != nil:
		return created, failed
	}
	return created, nil
}

// EnsureTimePartitionsTx is EnsureTimePartitions in the caller's
// transaction tx, by its TimePartitioning and its now() (the
// transaction's start): sql.MigrateWith creates the partitions in the
// transaction that records a new Ahead, so that both or neither are kept.
// It returns the partitions created (kept if tx commits) and a
// *PartitionsError naming those it could not create; any other error
// leaves tx aborted.
func EnsureTimePartitionsTx(ctx context.Context, tx pgx.Tx, table string) ([]string, error) {
	tp, err := ReadTimePartitioning(ctx, tx, table)
	if err != nil || tp.Interval == 0 {
		return nil, err
	}
	var now time.Time
	if err := tx.QueryRow(ctx, nowStmt.SQL).Scan(&now); err != nil {
		return nil, fmt.Errorf("time partitions of %s: %w", table, err)
	}
	// The partition holding now + Ahead intervals, even when that is
	// exactly its start.
	return createTimePartitions(ctx, tx, table, tp, now, now.Add(time.Duration(tp.Ahead)*tp.Interval+time.Second))
}

// PartitionsError is CreateTimePartitions' error when some partitions
// could not be created: the others were.
type PartitionsError struct {
	// Table is the outbox table.
	Table string
	// Failed are the partitions not created, in the order of their ranges.
	Failed []PartitionFailure
}

// PartitionFailure is one partition CreateTimePartitions could not
// create, and why.
type PartitionFailure struct {
	// Name is the partition's unqualified name (TimePartitionName).
	Name string
	Err  error
}

// Error names each partition not created and why.
func (e *PartitionsError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "create time partitions of %s: ", e.Table)
	for i, f := range e.Failed {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "partition %s: %v", f.Name, f.Err)
	}
	return b.String()
}

// Unwrap returns each partition's error.
func (e *PartitionsError) Unwrap() []error {
	var out []error
	for _, f := range e.Failed {
		out = append(out, f.Err)
	}
	return out
}

// Names returns the names of the partitions not created.
func (e *PartitionsError) Names() []string {
	var out []string
	for _, f := range e.Failed {
		out = append(out, f.Name)
	}
	return out
}

// CreateTimePartitions creates the missing partitions of table that cover
// [from, to): one per TimePartitioning.Interval, aligned to multiples of it
// since the Unix epoch, named by TimePartitionName, with PartitionStorage.
// Each is created as a table of its own (CREATE TABLE ... (LIKE table
// INCLUDING DEFAULTS INCLUDING CONSTRAINTS)) and attached, which locks
// table in SHARE UPDATE EXCLUSIVE mode only: producers and relays go on
// meanwhile (CREATE TABLE ... PARTITION OF would take ACCESS EXCLUSIVE).
// The table's indexes and row triggers are given to each partition by
// PostgreSQL when it is attached.
//
// Rows of a new partition's range in the DEFAULT partition (written while
// no partition covered it: relays down longer than Ahead intervals, or a
// created_at ahead of the database clock), which ATTACH PARTITION would
// refuse, are moved into it before it is attached, every column as it
// was (a leased row keeps its lease), under the table's EXCLUSIVE lock
// (LockForMove): writers, claims and marks wait for the move, plain reads
// go on. A partition that cannot be created all the same (a lock not had
// in time, a table of its name in the way) is skipped and the others are
// created: each is created under a savepoint of its own. All of them
// commit together.
//
// Partitions of one table are created under one advisory lock
// (sqlname.LockTimePartitions) and with lock_timeout 5s. The role needs
// to own table and to have CREATE on its schema. It returns the names of
// the partitions it created, and a *PartitionsError naming those it could
// not. A table without TimePartitioning is an error.
func CreateTimePartitions(ctx context.Context, pool *pgxpool.Pool, table string, from, to time.Time) ([]string, error) {
	tp, err := ReadTimePartitioning(ctx, pool, table)
	if err != nil {
		return nil, err
	}
	if tp.Interval == 0 {
		return nil, fmt.Errorf("create time partitions of %s: the table is not time-partitioned by pgoutbox (outbox-relay migrate --time-partitioned)", table)
	}
	var created []string
	var failed *PartitionsError
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		created, err = createTimePartitions(ctx, tx, table, tp, from, to)
		if errors.As(err, &failed) {
			return nil
		}
		return err
	})
	switch {
	case err != nil:
		return nil, err
	case failed != nil:
		return created, failed
	}
	return created, nil
}

// createTimePartitions is CreateTimePartitions in tx, by tp.
func createTimePartitions(ctx context.Context, tx pgx.Tx, table string, tp TimePartitioning, from, to time.Time) ([]string, error) {
	wrap := func(err error) error { return fmt.Errorf("create time partitions of %s: %w", table, err) }
	t := sqlname.Quote(table)
	lock, err := renderTable[sqlfile.NoArgs]("LockTimePartitions", table, "lock", sqlname.XactLock(sqlname.LockTimePartitions, table))
	if err != nil {
		return nil, wrap(err)
	}
	for _, q := range []string{setLockTimeoutStmt.SQL, lock.SQL} {
		if _, err := tx.Exec(ctx, q); err != nil {
			return nil, wrap(err)
		}
	}
	schema, err := TableSchema(ctx, tx, table)
	if err != nil {
		return nil, wrap(err)
	}
	have := map[string]bool{}
	rows, err := tx.Query(ctx, childPartitionsStmt.SQL, childPartitionsStmt.Args(tableArgs{t})...)
	if err != nil {
		return nil, wrap(err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, wrap(err)
		}
		have[n] = true
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(err)
	}
	var columns string
	def, err := DefaultPartition(ctx, tx, table)
	if err != nil {
		return nil, wrap(err)
	}
	if err := tx.QueryRow(ctx, tableColumnsStmt.SQL, tableColumnsStmt.Args(tableArgs{t})...).Scan(&columns); err != nil {
		return nil, wrap(err)
	}
	iv := int64(tp.Interval / time.Second)
	start := time.Unix(from.Unix()/iv*iv, 0).UTC()
	if from.Unix() < 0 && from.Unix()%iv != 0 {
		start = start.Add(-tp.Interval)
	}
	var missing []newPartition
	for ; start.Before(to); start = start.Add(tp.Interval) {
		if name := TimePartitionName(table, start); !have[name] {
			missing = append(missing, newPartition{table: table, name: name, partition: pgx.Identifier{schema, name}.Sanitize(),
				def: def, columns: columns, from: start, to: start.Add(tp.Interval)})
		}
	}
	// Rows to move: the table's EXCLUSIVE lock first, before any partition
	// is attached (an attach locks the DEFAULT partition, and a statement
	// waiting for it would hold the table's lock that LockForMove needs).
	var lockErr error
	for _, p := range missing {
		has, err := p.defaultHasRows(ctx, tx)
		if err != nil {
			return nil, wrap(err)
		}
		if has {
			lockErr = savepoint(ctx, tx, func(sp pgx.Tx) error { return p.exec(ctx, sp, "LockForMove") })
			break
		}
	}
	var created []string
	failed := &PartitionsError{Table: table}
	for _, p := range missing {
		err := savepoint(ctx, tx, func(sp pgx.Tx) error { return p.create(ctx, sp, lockErr) })
		if err != nil {
			failed.Failed = append(failed.Failed, PartitionFailure{Name: p.name, Err: err})
			continue
		}
		created = append(created, p.name)
	}
	if len(failed.Failed) > 0 {
		return created, failed
	}
	return created, nil
}

// savepoint runs f under a savepoint of tx: f's error rolls back what f
// did, and tx goes on. An error rolling back is returned with f's.
func savepoint(ctx context.Context, tx pgx.Tx, f func(pgx.Tx) error) error {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	if err = f(sp); err == nil {
		return sp.Commit(ctx)
	}
	if rerr := sp.Rollback(ctx); rerr != nil {
		return fmt.Errorf("%w (rolling back: %v)", err, rerr)
	}
	return err
}

// newPartition is one time partition createTimePartitions creates.
type newPartition struct {
	// table is the outbox table; name the new partition's unqualified
	// name, partition its name schema-qualified and quoted; def the
	// table's DEFAULT partition ("" when it has none); columns its
	// columns (TableColumns); [from, to) the new partition's range.
	table, name, partition, def, columns string
	from, to                             time.Time
}

// exec renders the query q for p and runs it in tx.
func (p newPartition) exec(ctx context.Context, tx pgx.Tx, q string) error {
	s, err := p.render(q)
	if err == nil {
		_, err = tx.Exec(ctx, s)
	}
	return err
}

// render renders the query q for p.
func (p newPartition) render(q string) (string, error) {
	lit := func(ts time.Time) string { return sqlname.Literal(ts.UTC().Format("2006-01-02 15:04:05+00")) }
	st, err := renderTable[sqlfile.NoArgs](q, p.table, "partition", p.partition, "storage", PartitionStorage,
		"from", lit(p.from), "to", lit(p.to), "default", p.def, "columns", p.columns)
	return st.SQL, err
}

// defaultHasRows reports whether the DEFAULT partition holds rows of p's
// range (DefaultHasRowsIn).
func (p newPartition) defaultHasRows(ctx context.Context, tx pgx.Tx) (bool, error) {
	if p.def == "" {
		return false, nil
	}
	q, err := p.render("DefaultHasRowsIn")
	if err != nil {
		return false, err
	}
	var has bool
	err = tx.QueryRow(ctx, q).Scan(&has)
	return has, err
}

// create creates p as a table of its own, moves the DEFAULT partition's
// rows of its range into it (which needs the table's lock for the move:
// lockErr is why it could not be had) and attaches it.
func (p newPartition) create(ctx context.Context, tx pgx.Tx, lockErr error) error {
	steps := []string{"CreateTimePartition"}
	has, err := p.defaultHasRows(ctx, tx)
	switch {
	case err != nil:
		return err
	case has && lockErr != nil:
		return fmt.Errorf("the DEFAULT partition %s holds rows of its range, and the table's lock to move them was not had: %w", p.def, lockErr)
	case has:
		steps = append(steps, "MoveFromDefault")
	}
	for _, q := range append(steps, "AttachTimePartition") {
		if err := p.exec(ctx, tx, q); err != nil {
			return err
		}
	}
	return nil
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
