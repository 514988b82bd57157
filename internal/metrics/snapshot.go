package metrics

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Snapshot holders: a transaction that keeps an old snapshot (an idle
// session in REPEATABLE READ, a long report, an abandoned BEGIN) stops
// VACUUM from removing any row version deleted after it began, in every
// table. The outbox table updates every row twice (claim, mark), so its
// dead versions pile up: the relay's own statements stay fast (its claims
// start at the floor), but the table and its indexes bloat and everything
// that reads them walks the dead versions. The relay cannot end such a
// transaction; it names it.

// SnapshotHolder is the oldest snapshot held in the relay's database.
type SnapshotHolder struct {
	// PID is the holding backend's process ID (pg_stat_activity.pid); 0
	// for a prepared transaction.
	PID int32
	// ApplicationName, User, State and ClientAddr describe the session as
	// pg_stat_activity does; without pg_read_all_stats, another role's
	// session shows less.
	ApplicationName, User, State, ClientAddr string
	// Age is how long its transaction has been open (now() - xact_start;
	// for a prepared transaction, since PREPARE).
	Age time.Duration
	// XminAge is how many transaction IDs behind the current one its
	// snapshot is (age(backend_xmin)).
	XminAge int64
}

// snapshotHolderRow is the row of OldestSnapshot.
type snapshotHolderRow struct {
	PID             int32   `db:"pid"`
	ApplicationName string  `db:"application_name"`
	User            string  `db:"usename"`
	State           string  `db:"state"`
	ClientAddr      string  `db:"client_addr"`
	AgeSeconds      float64 `db:"age_seconds"`
	XminAge         int64   `db:"xmin_age"`
}

func (h SnapshotHolder) String() string {
	if h.PID == 0 {
		return fmt.Sprintf("a prepared transaction, %s old", h.Age.Round(time.Second))
	}
	return fmt.Sprintf("pid %d (application_name %q, user %q, %s), transaction open for %s, its snapshot %d transactions behind",
		h.PID, h.ApplicationName, h.User, h.State, h.Age.Round(time.Second), h.XminAge)
}

// snapshotWatch keeps the oldest snapshot holder's age and warns, at most
// once per warnEvery, while it is older than Config.SnapshotWarnAfter.
type snapshotWatch struct {
	age      atomic.Int64 // nanoseconds
	lastWarn time.Time
}

// warnEvery bounds the snapshot warning to one line per interval.
const warnEvery = 5 * time.Minute

func (m *Metrics) snapshotGauge() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "outbox_oldest_snapshot_age_seconds",
		Help: "How long the oldest transaction holding a snapshot in the relay's database (or a prepared transaction) has been open, at the last refresh; while it is old, VACUUM cannot remove the outbox table's dead row versions. 0 when none.",
	}, func() float64 { return time.Duration(m.snap.age.Load()).Seconds() })
}

// OldestSnapshot returns the oldest snapshot holder of the relay's
// database, if any, and records its age for outbox_oldest_snapshot_age_seconds;
// while it is older than Config.SnapshotWarnAfter it logs one warning
// naming it, at most every 5 minutes. Errors are wrapped as "metrics:
// snapshot holders: ...".
func (m *Metrics) OldestSnapshot(ctx context.Context) (*SnapshotHolder, error) {
	row, err := queryOne[snapshotHolderRow](ctx, m.db, m.snapshotHolders.SQL)
	if isNoRows(err) {
		m.snap.age.Store(0)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("metrics: snapshot holders: %w", err)
	}
	h := SnapshotHolder{PID: row.PID, ApplicationName: row.ApplicationName, User: row.User, State: row.State,
		ClientAddr: row.ClientAddr, Age: time.Duration(row.AgeSeconds * float64(time.Second)), XminAge: row.XminAge}
	m.snap.age.Store(int64(h.Age))
	if m.cfg.SnapshotWarnAfter > 0 && h.Age > m.cfg.SnapshotWarnAfter && time.Since(m.snap.lastWarn) >= warnEvery {
		m.snap.lastWarn = time.Now()
		m.log.Warn("a transaction holds an old snapshot: VACUUM cannot remove the outbox table's dead rows while it runs, and the table and its indexes bloat; end it (pg_terminate_backend, or commit/roll back the prepared transaction)",
			zap.Int32("pid", h.PID), zap.String("application_name", h.ApplicationName), zap.String("user", h.User),
			zap.String("state", h.State), zap.String("client_addr", h.ClientAddr),
			zap.Duration("transaction_age", h.Age.Round(time.Second)), zap.Int64("xmin_age", h.XminAge))
	}
	return &h, nil
}

// checkSnapshotVisibility logs once, at the refresher's start, that the
// held-snapshot watch is half-blind when the role cannot see other roles'
// transactions: it would read 0 and never warn about them.
func (m *Metrics) checkSnapshotVisibility(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.QueryTimeout)
	defer cancel()
	v, err := queryOne[struct {
		Role         string `db:"role"`
		ReadAllStats bool   `db:"read_all_stats"`
	}](ctx, m.db, m.snapshotVisibility.SQL)
	if err != nil {
		m.log.Debug("snapshot watch: could not read the role's privileges", zap.Error(err))
		return
	}
	if !v.ReadAllStats {
		m.log.Warn("the held-snapshot watch cannot see other roles' transactions: pg_stat_activity hides their xact_start and backend_xmin from a role without the privileges of pg_read_all_stats, so it watches only this role's own sessions; GRANT pg_read_all_stats TO the relay's role",
			zap.String("role", v.Role))
	}
}
