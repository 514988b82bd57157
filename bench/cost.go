package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Cost is what a run cost the database and the relay over its measured
// window (see bench/README.md, "What a run costs"). Figures that cannot be
// measured are null in JSON: DB CPU when the server's processes are not on
// this machine (an external --database-url), relay CPU when the relay runs
// inside the bench process.
type Cost struct {
	// CostWindowS is the measured window, in seconds.
	CostWindowS float64 `json:"cost_window_s"`
	// CostEvents is the number of events the per-event figures divide by: the
	// events committed in the window (latency, baseline) or drained in it
	// (drain, backlog, burst).
	CostEvents int64 `json:"cost_events"`
	// DBCPUS is the CPU time of every process of the PostgreSQL cluster
	// (the postmaster's process tree, user + system, from /proc) over the
	// window, in seconds; null when unavailable.
	DBCPUS *float64 `json:"db_cpu_s"`
	// RelayCPUS is the relay process's CPU time (user + system, from
	// /proc/<pid>/stat) over the window, in seconds; null for a relay in
	// the bench process.
	RelayCPUS *float64 `json:"relay_cpu_s"`
	// BrokerCPUS is the CPU time of the Kafka broker's JVM (user + system,
	// all threads, from /proc/<pid>/stat) over the window, in seconds,
	// when the broker is a local process the bench started (Env.BrokerPID);
	// null otherwise (kfake runs inside the bench process, an external
	// broker is out of reach). It includes the bench's own consumers'
	// fetches and the floor probe's records, not only the relay's.
	BrokerCPUS *float64 `json:"broker_cpu_s"`
	// DBXacts is the database's committed plus rolled-back transactions
	// over the window (pg_stat_database xact_commit + xact_rollback), the
	// bench's own measuring transactions (BenchXacts) excluded.
	DBXacts int64 `json:"db_xacts"`
	// DBXactsPerS is DBXacts per second of the window.
	DBXactsPerS float64 `json:"db_xacts_per_s"`
	// BenchXacts is the number of the bench's own measuring transactions
	// that ran in the window and were excluded from DBXacts.
	BenchXacts int64 `json:"bench_xacts"`
	// WALBytes is the WAL written over the window (pg_current_wal_lsn()
	// after minus before), in bytes.
	WALBytes int64 `json:"wal_bytes"`
	// Checkpoints is the number of checkpoints that ran in the window
	// (pg_stat_bgwriter); a checkpoint inflates CPU and WAL figures.
	Checkpoints int64 `json:"checkpoints"`
	// Per event over the whole database (writers included): DB CPU in
	// ms, relay process CPU in ms, broker CPU in ms, transactions and WAL
	// bytes.
	DBCPUMSPerEvent     *float64 `json:"db_cpu_ms_per_event"`
	RelayCPUMSPerEvent  *float64 `json:"relay_cpu_ms_per_event"`
	BrokerCPUMSPerEvent *float64 `json:"broker_cpu_ms_per_event"`
	DBXactsPerEvent     float64  `json:"db_xacts_per_event"`
	WALBytesPerEvent    float64  `json:"wal_bytes_per_event"`
	// Baseline names what the relay's figures below subtract: the
	// writers-only run at the same load, or "none" when no writer ran in
	// the window (drains, bursts: everything is the relay's). Empty when
	// no baseline was measured; the relay's figures are then null.
	Baseline string `json:"baseline,omitempty"`
	// The relay's own share per event: this run's per-event figure minus
	// the baseline's (DB CPU in ms, transactions, WAL bytes). Noise can
	// make them slightly negative when the relay costs little.
	RelayDBCPUMSPerEvent  *float64 `json:"relay_db_cpu_ms_per_event"`
	RelayXactsPerEvent    *float64 `json:"relay_xacts_per_event"`
	RelayWALBytesPerEvent *float64 `json:"relay_wal_bytes_per_event"`
}

// BaselineNone is Cost.Baseline for windows in which no writer ran.
const BaselineNone = "none"

func f64(v float64) *float64 { return &v }

// costDelta is the difference between two costSamples.
type costDelta struct {
	seconds float64
	// dbCPU, relayCPU and brokerCPU are in seconds, NaN when
	// unavailable.
	dbCPU, relayCPU, brokerCPU float64
	xacts, bench               int64
	wal, ckpt                  int64
}

// minus subtracts o (a sub-window to leave out, e.g. a burst's INSERT).
func (d costDelta) minus(o costDelta) costDelta {
	return costDelta{
		seconds: d.seconds - o.seconds, dbCPU: d.dbCPU - o.dbCPU, relayCPU: d.relayCPU - o.relayCPU, brokerCPU: d.brokerCPU - o.brokerCPU,
		xacts: d.xacts - o.xacts, bench: d.bench + o.bench, wal: d.wal - o.wal, ckpt: d.ckpt,
	}
}

// cost turns d into a Cost with events as the per-event divisor.
func (d costDelta) cost(events int64) *Cost {
	c := &Cost{
		CostWindowS: d.seconds, CostEvents: events, DBXacts: d.xacts, BenchXacts: d.bench,
		WALBytes: d.wal, Checkpoints: d.ckpt,
	}
	if d.seconds > 0 {
		c.DBXactsPerS = float64(d.xacts) / d.seconds
	}
	if !math.IsNaN(d.dbCPU) {
		c.DBCPUS = f64(d.dbCPU)
	}
	if !math.IsNaN(d.relayCPU) {
		c.RelayCPUS = f64(d.relayCPU)
	}
	if !math.IsNaN(d.brokerCPU) {
		c.BrokerCPUS = f64(d.brokerCPU)
	}
	if events > 0 {
		n := float64(events)
		c.DBXactsPerEvent = float64(d.xacts) / n
		c.WALBytesPerEvent = float64(d.wal) / n
		if c.DBCPUS != nil {
			c.DBCPUMSPerEvent = f64(*c.DBCPUS * 1000 / n)
		}
		if c.RelayCPUS != nil {
			c.RelayCPUMSPerEvent = f64(*c.RelayCPUS * 1000 / n)
		}
		if c.BrokerCPUS != nil {
			c.BrokerCPUMSPerEvent = f64(*c.BrokerCPUS * 1000 / n)
		}
	}
	return c
}

// Attribute sets the relay's per-event figures of c: c's per-event
// figures minus base's (the writers-only run at the same load), labelled
// label. With base nil, the whole cost is the relay's (label should be
// BaselineNone). Per-event subtraction keeps the writers' share right even
// when the two runs' achieved rates differ a little.
func (c *Cost) Attribute(base *Cost, label string) {
	if c == nil || c.CostEvents <= 0 {
		return
	}
	c.Baseline = label
	if base == nil {
		c.RelayXactsPerEvent = f64(c.DBXactsPerEvent)
		c.RelayWALBytesPerEvent = f64(c.WALBytesPerEvent)
		if c.DBCPUMSPerEvent != nil {
			c.RelayDBCPUMSPerEvent = f64(*c.DBCPUMSPerEvent)
		}
		return
	}
	if base.CostEvents <= 0 {
		c.Baseline = ""
		return
	}
	c.RelayXactsPerEvent = f64(c.DBXactsPerEvent - base.DBXactsPerEvent)
	c.RelayWALBytesPerEvent = f64(c.WALBytesPerEvent - base.WALBytesPerEvent)
	if c.DBCPUMSPerEvent != nil && base.DBCPUMSPerEvent != nil {
		c.RelayDBCPUMSPerEvent = f64(*c.DBCPUMSPerEvent - *base.DBCPUMSPerEvent)
	}
}

// flushSQL makes the session flush its pending statistics, its own
// transaction's included, when the statement ends. The scan of
// pg_database matters: a backend with no pending table statistics (and no
// WAL statistics) skips the flush altogether, even a forced one, and its
// transaction counts stay in its memory (pgstat_report_stat's "nothing to
// do" exit, PostgreSQL 15); reading a table gives it pending statistics.
const flushSQL = "SELECT pg_stat_force_next_flush() FROM pg_database WHERE datname = current_database()"

// costProbe measures the database's side of a run through its own
// connection: pg_stat_database transaction counters, the WAL position,
// checkpoints, and (when the server runs on this machine) the CPU time of
// the postmaster's process tree from /proc.
//
// pg_stat_database is updated when a backend flushes its pending
// statistics: at the end of a transaction at most once a second
// (PGSTAT_MIN_INTERVAL), after 10s idle, or when it exits. The probe
// therefore runs every statement together with pg_stat_force_next_flush()
// (PostgreSQL 15+), so that its own transaction is counted at once and
// exactly once: between two samples lie exactly the transactions the probe
// ran from the first (included) to the second (excluded), which samples
// subtract. Other connections must be flushed by the caller (flushPool) or
// closed (a backend flushes when it exits) before the closing sample.
type costProbe struct {
	conn *pgx.Conn
	// postmaster is the PID of the server's postmaster in this machine's
	// /proc, 0 when unavailable (cpuNote says why).
	postmaster int
	cpuNote    string
	// flush reports whether pg_stat_force_next_flush() exists.
	flush bool
	// ckptSQL reads the checkpoint count (the view depends on the version).
	ckptSQL string
	// queries counts the statements (one transaction each) run on conn.
	queries int64
	// brokerPID, if set, returns the PID of the local broker process
	// whose CPU time samples read (Env.BrokerPID), 0 for none.
	brokerPID func() int
}

// costSample is one reading of the probe.
type costSample struct {
	at time.Time
	// dbTicks is the postmaster tree's CPU time in clock ticks, -1 when
	// unavailable.
	dbTicks int64
	// relaySec is the relay process's CPU time in seconds, NaN without one.
	relaySec float64
	// brokerSec is the broker process's CPU time in seconds, NaN without
	// one, and brokerPid that process (a restarted broker is another
	// process: its delta is unavailable).
	brokerSec float64
	brokerPid int
	// xacts is xact_commit + xact_rollback of the database.
	xacts int64
	// probeXacts is the number of the probe's own transactions counted
	// in xacts (all the probe ran before this sample).
	probeXacts int64
	wal, ckpt  int64
}

// newCostProbe connects to dsn (the database the runs use) and finds the
// postmaster. The connection uses the simple protocol, so that each
// statement is one transaction (no separate prepare).
func newCostProbe(ctx context.Context, dsn string) (*costProbe, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("bench: cost probe: parse database URL: %w", err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	cfg.RuntimeParams["application_name"] = "outbox-bench-probe"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("bench: cost probe: connect: %w", err)
	}
	p := &costProbe{conn: conn}
	var version int
	var backend int
	var dataDir string
	err = conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int, pg_backend_pid(),
		coalesce(current_setting('data_directory', true), '')`).Scan(&version, &backend, &dataDir)
	p.queries++
	if err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("bench: cost probe: %w", err)
	}
	p.flush = version >= 150000
	p.ckptSQL = "(SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter)"
	if version >= 170000 {
		p.ckptSQL = "(SELECT num_timed + num_requested FROM pg_stat_checkpointer)"
	}
	if p.flush {
		// Counts the connection's start-up and the statement above.
		if _, err := conn.Exec(ctx, flushSQL); err != nil {
			conn.Close(context.Background())
			return nil, fmt.Errorf("bench: cost probe: %w", err)
		}
		p.queries++
	}
	p.postmaster, p.cpuNote = findPostmaster(conn, backend, dataDir)
	return p, nil
}

// openCostProbe is newCostProbe on the runs' database, reading the
// broker process's CPU time too when Env.BrokerPID is set.
func (e *Env) openCostProbe(ctx context.Context) (*costProbe, error) {
	p, err := newCostProbe(ctx, e.DSN)
	if err != nil {
		return nil, err
	}
	p.brokerPID = e.BrokerPID
	return p, nil
}

// findPostmaster returns the postmaster of backend (the probe's own server
// process) if this machine's /proc shows it, else 0 and the reason. The
// backend must be the probe's: its process title names the probe's client
// port ("[local]" over a unix socket), or its parent's working directory is
// the server's data directory; a server in another PID namespace (a
// container) or on another host fails both checks.
func findPostmaster(conn *pgx.Conn, backend int, dataDir string) (int, string) {
	st, err := readProcStat(backend)
	if err != nil {
		return 0, fmt.Sprintf("unavailable: the server's backend (pid %d) is not in this machine's /proc (a remote server, or another PID namespace)", backend)
	}
	verified := false
	if title, err := os.ReadFile("/proc/" + strconv.Itoa(backend) + "/cmdline"); err == nil {
		want := "[local]"
		if a, ok := conn.PgConn().Conn().LocalAddr().(*net.TCPAddr); ok {
			want = "(" + strconv.Itoa(a.Port) + ")"
		}
		verified = strings.HasPrefix(string(title), "postgres") && strings.Contains(string(title), want)
	}
	if !verified && dataDir != "" {
		if cwd, err := os.Readlink("/proc/" + strconv.Itoa(st.ppid) + "/cwd"); err == nil && cwd == dataDir {
			verified = true
		}
	}
	if !verified {
		return 0, fmt.Sprintf("unavailable: pid %d on this machine is not the probe's backend (a server in another PID namespace?)", backend)
	}
	if _, _, err := treeCPUTicks(st.ppid); err != nil {
		return 0, "unavailable: " + err.Error()
	}
	return st.ppid, fmt.Sprintf("postmaster pid %d and its children, /proc/<pid>/stat utime+stime (+ reaped children), %g ticks/s", st.ppid, clockTicks())
}

// DBCPUAvailable reports whether the probe can read the server's CPU time.
func (p *costProbe) DBCPUAvailable() bool { return p.postmaster > 0 }

// Close closes the probe's connection.
func (p *costProbe) Close() {
	if p != nil && p.conn != nil {
		p.conn.Close(context.Background())
	}
}

// Sample reads the counters now; relayPid > 0 also reads that process's
// CPU time.
func (p *costProbe) Sample(ctx context.Context, relayPid int) (costSample, error) {
	s := costSample{dbTicks: -1, relaySec: math.NaN(), brokerSec: math.NaN()}
	flush := ""
	if p.flush {
		flush = "pg_stat_force_next_flush(), "
	}
	q := "SELECT " + flush + `pg_stat_clear_snapshot(),
		(SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()),
		(pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint, ` + p.ckptSQL
	rows, err := p.conn.Query(ctx, q)
	if err != nil {
		return s, fmt.Errorf("bench: cost sample: %w", err)
	}
	if !rows.Next() {
		rows.Close()
		if err := rows.Err(); err != nil {
			return s, fmt.Errorf("bench: cost sample: %w", err)
		}
		return s, errors.New("bench: cost sample: no row")
	}
	vals, err := rows.Values()
	rows.Close()
	if err != nil {
		return s, fmt.Errorf("bench: cost sample: %w", err)
	}
	s.probeXacts = p.queries
	p.queries++
	n := len(vals)
	for i, dst := range []*int64{&s.xacts, &s.wal, &s.ckpt} {
		v, ok := vals[n-3+i].(int64)
		if !ok {
			return s, fmt.Errorf("bench: cost sample: column %d is %T", n-3+i, vals[n-3+i])
		}
		*dst = v
	}
	s.at = time.Now()
	if p.postmaster > 0 {
		if t, _, err := treeCPUTicks(p.postmaster); err == nil {
			s.dbTicks = t
		}
	}
	if relayPid > 0 {
		if sec, err := processCPUSeconds(relayPid); err == nil {
			s.relaySec = sec
		}
	}
	if p.brokerPID != nil {
		if pid := p.brokerPID(); pid > 0 {
			if sec, err := processCPUSeconds(pid); err == nil {
				s.brokerSec, s.brokerPid = sec, pid
			}
		}
	}
	return s, nil
}

// delta returns b minus a; benchXacts are transactions the bench ran on
// other connections in between (flushPool), excluded from the count as the
// probe's own are.
func (p *costProbe) delta(a, b costSample, benchXacts int64) costDelta {
	own := b.probeXacts - a.probeXacts
	d := costDelta{
		seconds: b.at.Sub(a.at).Seconds(),
		dbCPU:   math.NaN(), relayCPU: b.relaySec - a.relaySec, brokerCPU: math.NaN(),
		xacts: b.xacts - a.xacts - own - benchXacts, bench: own + benchXacts,
		wal: b.wal - a.wal, ckpt: b.ckpt - a.ckpt,
	}
	if a.brokerPid > 0 && a.brokerPid == b.brokerPid {
		d.brokerCPU = b.brokerSec - a.brokerSec
	}
	if a.dbTicks >= 0 && b.dbTicks >= 0 {
		d.dbCPU = float64(b.dbTicks-a.dbTicks) / clockTicks()
	}
	return d
}

// flushPool makes every connection of pool flush its pending statistics
// (one flushSQL transaction on each, run with the simple protocol) and
// returns how many transactions that took, all counted in
// pg_stat_database by the time it returns. Nothing else may use pool
// meanwhile. Without pg_stat_force_next_flush it does nothing.
func (p *costProbe) flushPool(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	if !p.flush || pool == nil {
		return 0, nil
	}
	n := int(pool.Stat().IdleConns())
	var conns []*pgxpool.Conn
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	var done int64
	for range n {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return done, fmt.Errorf("bench: flush statistics: %w", err)
		}
		conns = append(conns, c)
		if _, err := c.Exec(ctx, flushSQL); err != nil {
			return done, fmt.Errorf("bench: flush statistics: %w", err)
		}
		done++
	}
	return done, nil
}

// backends returns the PIDs of the server processes of connections named
// app (application_name).
func (p *costProbe) backends(ctx context.Context, app string) ([]int, error) {
	var pids []int32
	err := p.conn.QueryRow(ctx, "SELECT "+p.flushCall()+`(SELECT coalesce(array_agg(pid), '{}') FROM pg_stat_activity WHERE application_name = $1)
		FROM pg_database WHERE datname = current_database()`, app).Scan(scanLast(&pids, p.flush)...)
	p.queries++
	if err != nil {
		return nil, fmt.Errorf("bench: list backends: %w", err)
	}
	out := make([]int, len(pids))
	for i, v := range pids {
		out[i] = int(v)
	}
	return out, nil
}

// flushCall is the select-list prefix that makes a probe statement flush
// its session's statistics at its end; the statement must read a table
// (see flushSQL).
func (p *costProbe) flushCall() string {
	if p.flush {
		return "pg_stat_force_next_flush(), "
	}
	return ""
}

// waitGone waits until the backends pids (connections already closed by
// their client) have exited, up to timeout: a backend flushes its
// statistics when it exits. With /proc it watches the processes;
// otherwise it asks pg_stat_activity (a backend leaves it just before its
// last flush, so that path is a little less exact).
func (p *costProbe) waitGone(ctx context.Context, pids []int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		left := 0
		if p.postmaster > 0 {
			for _, pid := range pids {
				if !processGone(pid) {
					left++
				}
			}
		} else if len(pids) > 0 {
			ps := make([]int32, len(pids))
			for i, v := range pids {
				ps[i] = int32(v)
			}
			var n int
			err := p.conn.QueryRow(ctx, "SELECT "+p.flushCall()+`(SELECT count(*)::int FROM pg_stat_activity WHERE pid = ANY($1))
				FROM pg_database WHERE datname = current_database()`, ps).Scan(scanLast(&n, p.flush)...)
			p.queries++
			if err != nil {
				return fmt.Errorf("bench: wait for backends: %w", err)
			}
			left = n
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: %d of %d server processes still running %s after their connections closed", left, len(pids), timeout)
		}
		if err := waitCtx(ctx, 5*time.Millisecond); err != nil {
			return err
		}
	}
}

// scanLast returns Scan destinations that skip the leading void column of
// a flushCall() statement.
func scanLast(dst any, flushed bool) []any {
	if flushed {
		return []any{nil, dst}
	}
	return []any{dst}
}
