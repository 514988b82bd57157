// Package retention deletes published outbox rows once they are older than
// a retention period, in small batches, so the table keeps only the history
// needed to answer incident questions ("was event X published, and when?").
//
// Each batch is one short statement in its own transaction, deleting at most
// Config.BatchSize rows, oldest published_at first, found through the
// partial index outbox_published_at_idx (migration 00004); the cleaner pauses
// Config.Pause between batches, so it never holds a long lock and never
// writes a burst of WAL. Rows locked by someone else are skipped (FOR UPDATE
// SKIP LOCKED), so several relays running the cleaner on one table do not
// wait for each other.
//
// Only published rows are deleted: unpublished rows and dead letters
// (dead_lettered_at set, never published) are never touched, whatever their
// age.
//
// On a table partitioned by range of created_at (`outbox-relay migrate
// --time-partitioned`), rows are named by partition and ctid (a ctid
// repeats across partitions). With Config.DropPartitions the cleaner drops
// whole partitions instead of deleting rows: a partition whose upper bound
// and whose last published_at are both older than the retention, and that
// holds no unpublished row (so no dead letter either: a dead letter is never
// published), is dropped under a brief ACCESS EXCLUSIVE lock on the table
// (DROP TABLE of a partition takes it anyway), after the same test again
// under that lock, so a row committed meanwhile keeps its partition. The
// lock is waited for at most Config.LockTimeout; a partition that could not
// be dropped is tried again at the next pass. The DEFAULT partition is
// never dropped: its old published rows are deleted in batches as on a
// plain table.
//
// The package is internal: cmd/outbox-relay runs the cleaner beside the
// relay (its --retention flags), so its API can follow the command.
package retention

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox/internal/config"
	"github.com/pgoutbox/outbox/internal/sqladmin"
	"github.com/pgoutbox/outbox/internal/sqlfile"
	"github.com/pgoutbox/outbox/internal/sqlname"
)

// Config configures a Cleaner.
type Config struct {
	// Table is the outbox table, optionally schema-qualified. Defaults to
	// "outbox".
	Table string
	// Retention is how long a published row is kept after its
	// published_at (database clock). Zero is meaningful and is not
	// defaulted: rows are deleted at the first pass after they are
	// published. DefaultRetention (168h) is the recommended value and the
	// run command's default. Must not be negative (to keep everything, do
	// not run a Cleaner).
	Retention time.Duration
	// Interval is the time between passes. Defaults to 1m, or to 1s when
	// Retention is 0. At least 10ms.
	Interval time.Duration
	// BatchSize is the most rows one DELETE statement removes. Defaults to
	// 1000; 1..100000.
	BatchSize int
	// Pause is the wait between two batches of one pass. Defaults to
	// 20ms; negative means no pause.
	Pause time.Duration
	// StatementTimeout bounds each DELETE. Defaults to 30s.
	StatementTimeout time.Duration
	// DropPartitions drops whole old partitions of a time-partitioned
	// table instead of deleting rows (see the package doc). On a table
	// that is not partitioned, each pass fails saying so.
	DropPartitions bool
	// LockTimeout bounds the wait for the table's ACCESS EXCLUSIVE lock
	// before a partition is dropped: producers and relays queue behind a
	// waiting lock, so the wait must be short. Defaults to 1s. Only with
	// DropPartitions.
	LockTimeout time.Duration
}

// Defaults and bounds of Config.
const (
	// DefaultRetention is the recommended Config.Retention: 7 days, so
	// incident questions about last week's events can be answered.
	DefaultRetention = 7 * 24 * time.Hour
	// DefaultInterval is Config.Interval's default when Retention > 0.
	DefaultInterval = time.Minute
	// DefaultImmediateInterval is Config.Interval's default when
	// Retention is 0.
	DefaultImmediateInterval = time.Second
	// DefaultBatchSize is Config.BatchSize's default.
	DefaultBatchSize = 1000
	// MaxBatchSize bounds Config.BatchSize.
	MaxBatchSize = 100000
	// DefaultPause is Config.Pause's default.
	DefaultPause = 20 * time.Millisecond
	// DefaultStatementTimeout is Config.StatementTimeout's default.
	DefaultStatementTimeout = 30 * time.Second
	// DefaultLockTimeout is Config.LockTimeout's default.
	DefaultLockTimeout = time.Second
)

// WithDefaults returns a copy of c with every zero field set to its
// default.
func (c Config) WithDefaults() Config {
	if c.Table == "" {
		c.Table = config.DefaultTable
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
		if c.Retention == 0 {
			c.Interval = DefaultImmediateInterval
		}
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.Pause == 0 {
		c.Pause = DefaultPause
	}
	if c.StatementTimeout == 0 {
		c.StatementTimeout = DefaultStatementTimeout
	}
	if c.LockTimeout == 0 {
		c.LockTimeout = DefaultLockTimeout
	}
	return c
}

// Validate returns a *outbox.FieldError naming the first invalid field of c
// with its defaults applied; c itself is not changed.
func (c Config) Validate() error {
	c = c.WithDefaults()
	bad := func(field, format string, args ...any) error {
		return config.Invalid("retention", field, format, args...)
	}
	switch {
	case strings.Count(c.Table, ".") > 1:
		return bad("Table", "%q is not a table or schema.table name", c.Table)
	case c.Retention < 0:
		return bad("Retention", "must not be negative, got %s", c.Retention)
	case c.Interval < 10*time.Millisecond:
		return bad("Interval", "must be at least 10ms, got %s", c.Interval)
	case c.BatchSize < 1 || c.BatchSize > MaxBatchSize:
		return bad("BatchSize", "must be 1..%d, got %d", MaxBatchSize, c.BatchSize)
	case c.StatementTimeout <= 0:
		return bad("StatementTimeout", "must be positive, got %s", c.StatementTimeout)
	case c.LockTimeout < time.Millisecond:
		return bad("LockTimeout", "must be at least 1ms, got %s", c.LockTimeout)
	}
	return nil
}

// DB is what a Cleaner needs; *pgxpool.Pool implements it. Each Exec runs
// in its own (implicit) transaction; Begin starts the transaction that
// drops a partition.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Stats are a Cleaner's cumulative counters.
type Stats struct {
	// Passes counts completed passes; Batches DELETE statements run;
	// Deleted rows deleted; Errors failed statements; DroppedPartitions
	// partitions dropped (Config.DropPartitions).
	Passes, Batches, Deleted, Errors, DroppedPartitions int64
}

// Pass describes one pass.
type Pass struct {
	// Deleted is the number of rows the pass deleted.
	Deleted int64
	// Batches is the number of DELETE statements it ran.
	Batches int
	// LargestBatch is the most rows one of its statements deleted (at most
	// Config.BatchSize).
	LargestBatch int64
	// DroppedPartitions names the partitions the pass dropped
	// (Config.DropPartitions).
	DroppedPartitions []string
}

// Cleaner deletes old published rows.
type Cleaner struct {
	cfg Config
	db  DB
	log *zap.Logger
	sql *statements // rendered by New (statements.go)
	// deleteBatch is a batch's DELETE. resolved is set once the first pass
	// has read whether the table is partitioned; deleteBatch is then the
	// statement for it (SQL "" when DropPartitions leaves nothing to
	// delete row by row).
	deleteBatch sqlfile.Stmt[deleteArgs]
	resolved    bool
	partitioned bool

	passes, batches, deleted, errors, dropped atomic.Int64
}

// New returns a Cleaner on db. logger may be nil; the Cleaner logs to
// logger.Named("retention"). It returns cfg's validation error.
func New(cfg Config, db DB, logger *zap.Logger) (*Cleaner, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if db == nil {
		return nil, fmt.Errorf("retention: db is nil")
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	st, err := newStatements(cfg)
	if err != nil {
		return nil, err
	}
	return &Cleaner{cfg: cfg, db: db, log: logger.Named("retention"), sql: st, deleteBatch: st.plainDelete}, nil
}

// resolve reads, once, whether the table is partitioned, and picks the
// DELETE for it: on a partitioned table with DropPartitions, the DELETE of
// its DEFAULT partition alone ("" when it has none).
func (c *Cleaner) resolve(ctx context.Context) error {
	if c.resolved {
		return nil
	}
	var partitioned bool
	var def *string
	q := c.sql.partitioned
	err := c.db.QueryRow(ctx, q.SQL, q.Args(tableArgs{Table: sqlname.Quote(c.cfg.Table)})...).Scan(&partitioned, &def)
	if err != nil {
		return err
	}
	switch {
	case !partitioned && c.cfg.DropPartitions:
		return fmt.Errorf("table %s is not partitioned: DropPartitions (--retention-drop-partitions) needs a time-partitioned table (outbox-relay migrate --time-partitioned)", c.cfg.Table)
	case !partitioned:
		c.deleteBatch = c.sql.plainDelete
	case c.cfg.DropPartitions && def != nil:
		if c.deleteBatch, err = onPartition[deleteArgs](c.sql, "DeleteBatch", "table", *def); err != nil {
			return err
		}
	case c.cfg.DropPartitions:
		c.deleteBatch = sqlfile.Stmt[deleteArgs]{}
	default:
		c.deleteBatch = c.sql.partitionedDelete
	}
	c.partitioned, c.resolved = partitioned, true
	return nil
}

// dropPartitions drops the partitions that hold only rows published
// longer than the retention ago and whose upper bound is that old too
// (see the package doc), oldest first, each in a transaction of its own.
// A partition whose lock could not be had in time is left for the next
// pass; other errors end the pass.
func (c *Cleaner) dropPartitions(ctx context.Context, p *Pass) error {
	parts, err := sqladmin.ListTimePartitions(ctx, c.db, c.cfg.Table)
	if err != nil {
		return err
	}
	var cutoff time.Time
	q := c.sql.cutoff
	if err := c.db.QueryRow(ctx, q.SQL, q.Args(retentionArgs{Retention: c.cfg.Retention.Microseconds()})...).Scan(&cutoff); err != nil {
		return err
	}
	for _, part := range parts {
		if part.Default || part.To.IsZero() || part.To.After(cutoff) {
			continue
		}
		// Outside the lock first: most partitions past the cutoff that
		// are not droppable stay so for a while (a held dead letter).
		done, err := c.droppable(ctx, c.db, part)
		if err != nil {
			return err
		}
		if !done {
			continue
		}
		err = pgx.BeginFunc(ctx, c.db, func(tx pgx.Tx) error {
			for _, q := range []sqlfile.Stmt[sqlfile.NoArgs]{c.sql.lockTimeout, c.sql.lockTimePartitions, c.sql.lockTable} {
				if _, err := tx.Exec(ctx, q.SQL); err != nil {
					return err
				}
			}
			ok, err := c.droppable(ctx, tx, part)
			if err != nil || !ok {
				return err
			}
			drop, err := onPartition[sqlfile.NoArgs](c.sql, "DropPartition", "partition", part.Name)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, drop.SQL); err != nil {
				return err
			}
			p.DroppedPartitions = append(p.DroppedPartitions, part.Name)
			return nil
		})
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && pgErr.Code == pgerrcode.LockNotAvailable:
			c.log.Info("retention: the table's lock was not free in time; the partition is dropped at a later pass",
				zap.String("partition", part.Name), zap.Duration("lock_timeout", c.cfg.LockTimeout))
		case err != nil:
			return fmt.Errorf("drop partition %s: %w", part.Name, err)
		}
	}
	return nil
}

// droppable reports whether every row of part is published, the last of
// them longer than the retention ago (by the database clock).
func (c *Cleaner) droppable(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, part sqladmin.TimePartition) (bool, error) {
	var ok bool
	s, err := onPartition[retentionArgs](c.sql, "Droppable", "partition", part.Name)
	if err != nil {
		return false, err
	}
	err = q.QueryRow(ctx, s.SQL, s.Args(retentionArgs{Retention: c.cfg.Retention.Microseconds()})...).Scan(&ok)
	return ok, err
}

// DeleteSQL returns the statement of one batch ($1: Config.Retention in
// microseconds, $2: Config.BatchSize), for EXPLAIN: the plain table's
// until a pass has found the table partitioned.
func (c *Cleaner) DeleteSQL() string { return c.deleteBatch.SQL }

// Config returns the Cleaner's configuration with defaults applied.
func (c *Cleaner) Config() Config { return c.cfg }

// Stats returns a snapshot of the Cleaner's counters.
func (c *Cleaner) Stats() Stats {
	return Stats{Passes: c.passes.Load(), Batches: c.batches.Load(), Deleted: c.deleted.Load(), Errors: c.errors.Load(), DroppedPartitions: c.dropped.Load()}
}

// Clean runs one pass: DELETE statements of at most Config.BatchSize rows,
// Config.Pause apart, until a statement deletes fewer than BatchSize rows or
// ctx is done. It returns what it deleted, and the first error (wrapped as
// "retention: delete: ..."), which ends the pass; rows deleted before it
// stay deleted. A pass cut short by ctx returns ctx's error.
func (c *Cleaner) Clean(ctx context.Context) (Pass, error) {
	var p Pass
	if err := c.resolve(ctx); err != nil {
		if ctx.Err() != nil {
			return p, ctx.Err()
		}
		c.errors.Add(1)
		return p, fmt.Errorf("retention: %w", err)
	}
	if c.cfg.DropPartitions {
		err := c.dropPartitions(ctx, &p)
		c.dropped.Add(int64(len(p.DroppedPartitions)))
		if err != nil {
			if ctx.Err() != nil {
				return p, ctx.Err()
			}
			c.errors.Add(1)
			return p, fmt.Errorf("retention: %w", err)
		}
		if c.deleteBatch.SQL == "" {
			c.passes.Add(1)
			return p, nil
		}
	}
	for {
		sctx, cancel := context.WithTimeout(ctx, c.cfg.StatementTimeout)
		tag, err := c.db.Exec(sctx, c.deleteBatch.SQL, c.deleteBatch.Args(deleteArgs{Retention: c.cfg.Retention.Microseconds(), BatchSize: c.cfg.BatchSize})...)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return p, ctx.Err()
			}
			c.errors.Add(1)
			return p, fmt.Errorf("retention: delete: %w", err)
		}
		n := tag.RowsAffected()
		p.Batches++
		p.Deleted += n
		p.LargestBatch = max(p.LargestBatch, n)
		c.batches.Add(1)
		c.deleted.Add(n)
		if n < int64(c.cfg.BatchSize) {
			c.passes.Add(1)
			return p, nil
		}
		if c.cfg.Pause > 0 {
			select {
			case <-ctx.Done():
				return p, ctx.Err()
			case <-time.After(c.cfg.Pause):
			}
		}
	}
}

// Run runs a pass at once and then every Config.Interval until ctx is
// done, and returns nil then. A failed pass is logged (at warn level, once
// until a pass succeeds again) and retried at the next interval.
func (c *Cleaner) Run(ctx context.Context) error {
	c.log.Info("retention cleaner started",
		zap.Duration("retention", c.cfg.Retention),
		zap.Duration("interval", c.cfg.Interval),
		zap.Int("batch_size", c.cfg.BatchSize),
		zap.String("table", c.cfg.Table))
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	failing := false
	for {
		start := time.Now()
		p, err := c.Clean(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			if !failing {
				c.log.Warn("retention pass failed; retrying at the next interval", zap.Error(err),
					zap.Int64("deleted", p.Deleted), zap.Duration("retry_in", c.cfg.Interval))
			}
			failing = true
		default:
			if failing {
				c.log.Info("retention pass works again")
			}
			failing = false
			if len(p.DroppedPartitions) > 0 {
				c.log.Info("retention dropped partitions", zap.Strings("partitions", p.DroppedPartitions))
			}
			if p.Deleted > 0 {
				if ce := c.log.Check(zap.DebugLevel, "retention pass"); ce != nil {
					ce.Write(zap.Int64("deleted", p.Deleted), zap.Int("batches", p.Batches), zap.Duration("took", time.Since(start)))
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
