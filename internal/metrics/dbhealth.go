package metrics

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox/internal/sqladmin"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

// The table check: what a database setting can change under a running
// relay without a word (the relay refuses the same at start, see
// relay.Service.Run and sqladmin.CheckDurability): the table or its seq
// sequence made UNLOGGED (a crash then empties it), or the sequence
// restarted below the seqs the table holds (new events then wait for the
// relay's rescan). One statement (TableCheck) every
// Config.Interval, beside the table gauges: the persistence of the table
// and of its sequence from pg_class, the sequence's last value, the
// highest unpublished seq and the seq of the row published last (one
// probe of a partial index each), and the database's logical replication
// slots with the WAL each keeps (gauges).
// The relay's own published rows (Published) add the highest seq it
// published, so the restart stays visible once the rows below the old
// maximum are all published. A problem fails the "table" readiness check,
// and is logged once when it starts and once when it ends.

// tableCheck is the table check's state.
type tableCheck struct {
	// seq is the table's seq sequence (quoted, as regclass prints it),
	// looked up on the first check; "" until then or when it has none.
	// sql is the check's statement for it (statements.tableCheckSQL).
	seq      string
	sql      string
	resolved bool
	// def is the table's DEFAULT partition (as regclass prints it), ""
	// when it has none; defaultRows the rows in it at the last check.
	def         string
	defaultRows atomic.Int64
	// published is the highest seq this relay has published (Published).
	published atomic.Int64
	// problem is the check's verdict: nil while the table is fine.
	problem atomic.Pointer[checkProblem]
	slots   atomic.Pointer[[]sqladmin.Slot]
	// behind is the SequenceBehindError of the current episode: its exact
	// maximum is read once, when the episode starts.
	behind *sqladmin.SequenceBehindError
	mu     sync.Mutex // serializes checks
	failed bool       // the last check failed (logged once)
}

// checkProblem is what the table check found wrong.
type checkProblem struct {
	kind string // "unlogged" or "sequence"
	err  error
}

// noteSeqs records the highest seq of rows this relay published.
func (c *tableCheck) noteSeqs(maxSeq int64) {
	for {
		cur := c.published.Load()
		if maxSeq <= cur || c.published.CompareAndSwap(cur, maxSeq) {
			return
		}
	}
}

// CheckTable runs the table check now (RunRefresher runs it every
// Config.Interval), bounded by Config.QueryTimeout: it returns what is
// wrong with the table (an *outboxsql.UnloggedError or an
// *sqladmin.SequenceBehindError), nil when nothing is, and the query's
// error, wrapped as "metrics: table check: ...", when it could not run
// (the verdict is kept then). The verdict is what the "table" readiness
// check reports.
func (m *Metrics) CheckTable(ctx context.Context) (problem error, err error) {
	c := &m.tcheck
	c.mu.Lock()
	defer c.mu.Unlock()
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, m.cfg.QueryTimeout)
	defer cancel()
	p, err := m.checkTable(ctx)
	m.tableChecks.Inc()
	if err != nil {
		// A check stopped by the caller (shutdown) did not fail: no line.
		if !c.failed && parent.Err() == nil {
			c.failed = true
			m.log.Warn("table check failed; its verdict is kept", zap.String("table", m.cfg.Table), zap.Error(err))
		}
		if old := c.problem.Load(); old != nil {
			return old.err, fmt.Errorf("metrics: table check: %w", err)
		}
		return nil, fmt.Errorf("metrics: table check: %w", err)
	}
	c.failed = false
	old := c.problem.Swap(p)
	switch {
	case p != nil && (old == nil || old.kind != p.kind):
		m.log.Error("the outbox table needs a fix: readiness fails until it is made", zap.String("table", m.cfg.Table), zap.String("problem", p.err.Error()))
	case p == nil && old != nil:
		m.log.Info("the outbox table is fine again", zap.String("table", m.cfg.Table), zap.String("was", old.err.Error()))
	}
	if p == nil {
		return nil, nil
	}
	return p.err, nil
}

// checkTable runs the check's statement and judges it.
func (m *Metrics) checkTable(ctx context.Context) (*checkProblem, error) {
	c := &m.tcheck
	if !c.resolved {
		seq, err := sqladmin.SequenceOf(ctx, m.db, m.cfg.Table)
		if err != nil {
			return nil, err
		}
		def, err := sqladmin.DefaultPartition(ctx, m.db, m.cfg.Table)
		if err != nil {
			return nil, err
		}
		sql, err := m.tableCheckSQL(seq, def)
		if err != nil {
			return nil, err
		}
		c.seq, c.def, c.sql, c.resolved = seq, def, sql, true
	}
	// What this relay has published before the statement runs: every seq
	// in it was handed out before the statement reads the sequence. One
	// published meanwhile may be above what it reads, on a healthy table.
	high := c.published.Load()
	b := &pgx.Batch{}
	b.Queue(m.settings.SQL)
	b.Queue(c.sql)
	var row tableCheckRow
	br := m.db.SendBatch(ctx, b)
	_, err := br.Exec()
	if err == nil {
		row, err = batchOne[tableCheckRow](br)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		c.resolved = false // the sequence may have been renamed or dropped
		return nil, err
	}
	var ss []sqladmin.Slot
	if err := json.Unmarshal(row.Slots, &ss); err != nil {
		return nil, fmt.Errorf("replication slots: %w", err)
	}
	c.slots.Store(&ss)
	if row.DefaultRows != nil {
		c.defaultRows.Store(*row.DefaultRows)
	} else {
		c.defaultRows.Store(0)
	}
	switch {
	case row.Unlogged:
		return &checkProblem{"unlogged", &outboxsql.UnloggedError{Table: m.cfg.Table}}, nil
	case row.UnloggedPartition != nil:
		return &checkProblem{"unlogged", &outboxsql.UnloggedError{Table: m.cfg.Table, Partition: *row.UnloggedPartition}}, nil
	case row.SequenceUnlogged != nil && *row.SequenceUnlogged:
		return &checkProblem{"unlogged", &outboxsql.UnloggedError{Table: m.cfg.Table, Sequence: c.seq}}, nil
	case row.LastValue == nil:
		c.behind = nil
		return nil, nil
	}
	next := *row.LastValue
	if row.IsCalled != nil && *row.IsCalled {
		next++
	}
	for _, s := range []*int64{row.MaxUnpublished, row.LastPublished} {
		if s != nil && *s > high {
			high = *s
		}
	}
	if next > high {
		c.behind = nil
		return nil, nil
	}
	if c.behind == nil {
		// The fix needs the table's real maximum: one scan, once per
		// episode.
		var maxSeq *int64
		if err := m.db.QueryRow(ctx, m.maxSeq.SQL).Scan(&maxSeq); err == nil && maxSeq != nil && *maxSeq > high {
			high = *maxSeq
		}
		c.behind = &sqladmin.SequenceBehindError{Table: m.cfg.Table, Sequence: c.seq, Next: next, MaxSeq: high}
	}
	// A new error each time: the last one is read by readiness meanwhile.
	e := *c.behind
	e.Next, e.MaxSeq = next, max(e.MaxSeq, high)
	c.behind = &e
	return &checkProblem{"sequence", &e}, nil
}

// tableProblem returns the "table" readiness check's error: nil while the
// table is fine.
func (m *Metrics) tableProblem() error {
	if p := m.tcheck.problem.Load(); p != nil {
		return p.err
	}
	return nil
}

// slotCollector exports the replication slots of the last table check.
type slotCollector struct{ m *Metrics }

var (
	descSlotRetained = prometheus.NewDesc("outbox_replication_slot_retained_wal_bytes",
		"WAL kept for a logical replication slot of the relay's database, pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), at the last table check: an inactive slot (a removed Debezium connector) keeps WAL until the disk fills. Absent on a standby.", []string{"slot"}, nil)
	descSlotActive = prometheus.NewDesc("outbox_replication_slot_active",
		"1 while a client streams from the logical replication slot, else 0, at the last table check.", []string{"slot"}, nil)
)

func (c slotCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descSlotRetained
	ch <- descSlotActive
}

func (c slotCollector) Collect(ch chan<- prometheus.Metric) {
	p := c.m.tcheck.slots.Load()
	if p == nil {
		return
	}
	for _, s := range *p {
		active := 0.0
		if s.Active {
			active = 1
		}
		ch <- prometheus.MustNewConstMetric(descSlotActive, prometheus.GaugeValue, active, s.Name)
		if s.RetainedWALBytes != nil {
			ch <- prometheus.MustNewConstMetric(descSlotRetained, prometheus.GaugeValue, float64(*s.RetainedWALBytes), s.Name)
		}
	}
}

// tableCheckRow is the row of TableCheck; the sequence's columns are
// NULL from NoSequenceColumns.
type tableCheckRow struct {
	Unlogged          bool    `db:"unlogged"`
	LastValue         *int64  `db:"last_value"`
	IsCalled          *bool   `db:"is_called"`
	SequenceUnlogged  *bool   `db:"sequence_unlogged"`
	UnloggedPartition *string `db:"unlogged_partition"`
	MaxUnpublished    *int64  `db:"max_unpublished"`
	LastPublished     *int64  `db:"last_published"`
	DefaultRows       *int64  `db:"default_rows"`
	Slots             []byte  `db:"slots"`
}
