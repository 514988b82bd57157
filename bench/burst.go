package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox"
)

// BurstConfig configures a burst run.
type BurstConfig struct {
	// Relay configures the relay (Mode defaults to ModeNotifyProc, which
	// needs Env.RelayBin; ModeNotify runs it in the bench process, whose
	// CPU time is then not measured).
	Relay RelayConfig
	// Events is the number of events in each burst, one transaction each.
	// Defaults to 100000.
	Events int
	// Idle is how long the relay idles, after the warm-up's last event
	// arrived, before the first burst. Defaults to 60s.
	Idle time.Duration
	// IdleSettle is where, from the start of Idle, the idle cost starts
	// being measured: an idle connection flushes its statistics 10s after
	// its last transaction (PostgreSQL's PGSTAT_IDLE_INTERVAL), so the
	// warm-up's are counted before the window opens. Defaults to 10s; it
	// must be shorter than Idle.
	IdleSettle time.Duration
	// ShortIdle is the idle time, after the first burst's last event
	// arrived, before the second burst. Defaults to 1s.
	ShortIdle time.Duration
	// PayloadBytes is the approximate JSON payload size in bytes. Defaults
	// to 100.
	PayloadBytes int
	// Aggregates is the number of distinct aggregate IDs. Defaults to 1000.
	Aggregates int
	// Timeout bounds each burst's drain. Defaults to 2m.
	Timeout time.Duration
}

func (c *BurstConfig) validate() error {
	if c.Relay.Mode == "" {
		c.Relay.Mode = ModeNotifyProc
	}
	if c.Events == 0 {
		c.Events = 100000
	}
	if c.Idle == 0 {
		c.Idle = 60 * time.Second
	}
	if c.IdleSettle == 0 {
		c.IdleSettle = 10 * time.Second
	}
	if c.ShortIdle == 0 {
		c.ShortIdle = time.Second
	}
	if c.PayloadBytes == 0 {
		c.PayloadBytes = 100
	}
	if c.Aggregates == 0 {
		c.Aggregates = 1000
	}
	if c.Timeout == 0 {
		c.Timeout = 2 * time.Minute
	}
	switch {
	case c.Relay.Mode != ModeNotifyProc && c.Relay.Mode != ModeNotify:
		return fmt.Errorf("bench: BurstConfig.Relay.Mode: %q is not notify-proc or notify", c.Relay.Mode)
	case c.Events < 0 || c.Events > 50e6:
		return fmt.Errorf("bench: BurstConfig.Events: must be 1..50000000, got %d", c.Events)
	case c.Idle < 0 || c.ShortIdle < 0 || c.Timeout < 0:
		return errors.New("bench: BurstConfig: durations must be positive")
	case c.IdleSettle < 0 || c.IdleSettle >= c.Idle:
		return fmt.Errorf("bench: BurstConfig.IdleSettle: must be positive and shorter than Idle (%s), got %s", c.Idle, c.IdleSettle)
	case c.PayloadBytes < 0 || c.PayloadBytes > outbox.DefaultMaxRecordBytes:
		return fmt.Errorf("bench: BurstConfig.PayloadBytes: must be 1..%d, got %d", outbox.DefaultMaxRecordBytes, c.PayloadBytes)
	case c.Aggregates < 0:
		return fmt.Errorf("bench: BurstConfig.Aggregates: must be positive, got %d", c.Aggregates)
	}
	return c.Relay.validate()
}

// Burst is the result of a burst run: the relay's idle cost, and the drain
// rate of a burst after a long idle period against the same burst after a
// short one.
type Burst struct {
	// BurstEvents is the number of events of each burst.
	BurstEvents int64 `json:"burst_events"`
	// IdleS and ShortIdleS are the idle periods before the first and the
	// second burst, in seconds.
	IdleS      float64 `json:"burst_idle_s"`
	ShortIdleS float64 `json:"burst_short_idle_s"`
	// InsertS is the first burst's transaction time (BEGIN to COMMIT
	// returned: the INSERT ... SELECT FROM generate_series and pg_notify),
	// in seconds.
	InsertS float64 `json:"burst_insert_s"`
	// AfterIdleEventsPerS is the first burst's drain rate (after IdleS):
	// BurstEvents over the time from its COMMIT returning to its last event
	// received; AfterShortIdleEventsPerS the second's (after ShortIdleS).
	AfterIdleEventsPerS      float64 `json:"burst_after_idle_events_per_s"`
	AfterShortIdleEventsPerS float64 `json:"burst_after_short_idle_events_per_s"`
	// BurstRatio is AfterIdleEventsPerS over AfterShortIdleEventsPerS.
	BurstRatio float64 `json:"burst_ratio"`
	// FirstEventS and ShortFirstEventS are the times from each burst's
	// COMMIT to its first event received, in seconds.
	FirstEventS      float64 `json:"burst_first_event_s"`
	ShortFirstEventS float64 `json:"burst_short_first_event_s"`
	// BurstReceived is how many distinct burst events arrived (of
	// 2×BurstEvents); BurstDuplicates receptions beyond the first.
	BurstReceived   int64 `json:"burst_received"`
	BurstDuplicates int64 `json:"burst_duplicates"`
	// The idle cost, measured over IdleCostWindowS seconds of the idle
	// period (from BurstConfig.IdleSettle to its end) while nothing is
	// written: the database's transactions per second (the bench's own
	// excluded), the CPU time of the database's processes and of the relay
	// process per 10 s of idling (null when unavailable), WAL bytes per
	// second and the relay's claims per second.
	IdleCostWindowS     float64  `json:"idle_cost_window_s"`
	IdleDBXactsPerS     float64  `json:"idle_db_xacts_per_s"`
	IdleDBCPUSPer10S    *float64 `json:"idle_db_cpu_s_per_10s"`
	IdleRelayCPUSPer10S *float64 `json:"idle_relay_cpu_s_per_10s"`
	IdleWALBytesPerS    float64  `json:"idle_wal_bytes_per_s"`
	IdleCostClaimsPerS  float64  `json:"idle_cost_claims_per_s"`
}

// burstIDs returns the event IDs that burstInsert gives to rows lo..hi
// (inclusive): prefix (8 hex digits) followed by the row number in hex,
// so that they ascend like the writer's UUIDv7s.
func burstIDs(prefix string, lo, hi int) []uuid.UUID {
	ids := make([]uuid.UUID, 0, hi-lo+1)
	for g := lo; g <= hi; g++ {
		ids = append(ids, uuid.MustParse(fmt.Sprintf("%s%024x", prefix, g)))
	}
	return ids
}

// burstInsertSQL inserts rows $2..$3 of generate_series with burstIDs'
// IDs ($1 the prefix), aggregate agg-(g mod $4) and a payload of about
// $5 bytes, the way an application backfills events in bulk.
const burstInsertSQL = `INSERT INTO outbox (id, aggregate_id, event_type, payload)
SELECT ($1::text || lpad(to_hex(g), 24, '0'))::uuid, 'agg-' || (g % $4::int), 'bench.event',
       jsonb_build_object('pad', repeat('x', $5::int))
FROM generate_series($2::bigint, $3::bigint) AS g`

// padFor returns the pad length of a payload of about n bytes (see
// payload).
func padFor(n int) int { return max(n-len(`{"pad":""}`), 0) }

// dialSimple opens a connection on db's schema (named app) that uses the
// simple protocol, so that each statement outside a transaction block is
// one transaction, and flushes its start-up's statistics.
func (db *runDB) dialSimple(ctx context.Context, app string) (*pgx.Conn, error) {
	cc := db.Config.ConnConfig.Copy()
	cc.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	cc.RuntimeParams["application_name"] = app
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("bench: connect: %w", err)
	}
	return conn, nil
}

// insertBurst runs one transaction on conn: rows lo..hi (INSERT ... SELECT
// FROM generate_series) and a pg_notify on channel, with the connection's
// statistics flushed at its end when flush is set (so the transaction is
// counted at once). It returns when COMMIT returned.
func insertBurst(ctx context.Context, conn *pgx.Conn, prefix string, lo, hi, aggregates, payloadBytes int, channel string, flush bool) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("bench: burst: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, burstInsertSQL, prefix, lo, hi, aggregates, padFor(payloadBytes)); err != nil {
		return fmt.Errorf("bench: burst insert: %w", err)
	}
	q := "SELECT pg_notify($1, '')"
	if flush {
		q = "SELECT pg_stat_force_next_flush(), pg_notify($1, '')"
	}
	if _, err := tx.Exec(ctx, q, channel); err != nil {
		return fmt.Errorf("bench: burst notify: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("bench: burst commit: %w", err)
	}
	return nil
}

// Burst runs the burst scenario: a relay (a process with its defaults, in
// the suite) starts on a fresh table and publishes a few warm-up events;
// then nothing is written for cfg.Idle, over which the idle cost is
// measured (from cfg.IdleSettle on); then one transaction inserts
// cfg.Events rows (INSERT ... SELECT FROM generate_series, then pg_notify)
// and the run waits until the consumer has them all; after cfg.ShortIdle
// a second such burst follows. Run.Cost covers the two drains (from the
// first COMMIT until the relay stopped, the second burst's INSERT left
// out) over 2×cfg.Events events.
func (e *Env) Burst(ctx context.Context, cfg BurstConfig) (Run, error) {
	if err := e.validate(); err != nil {
		return Run{}, err
	}
	if err := cfg.validate(); err != nil {
		return Run{}, err
	}
	log := e.Log.Named("burst")
	defer e.Progress.End()
	b := &Burst{BurstEvents: int64(cfg.Events), IdleS: cfg.Idle.Seconds(), ShortIdleS: cfg.ShortIdle.Seconds()}
	run := Run{Scenario: ScenarioBurst, Mode: cfg.Relay.Mode, Burst: b}
	n := cfg.Events
	const warm = 10
	prefix := randHex(4)
	ids := burstIDs(prefix, 1, 2*n)
	for range warm {
		ids = append(ids, outbox.NewID())
	}
	db, err := e.freshDB(ctx, 2)
	if err != nil {
		return run, err
	}
	defer db.Close()
	topic, err := e.freshTopic(ctx, "burst")
	if err != nil {
		return run, err
	}
	defer e.dropTopic(topic)
	probe, err := e.openCostProbe(ctx)
	if err != nil {
		return run, err
	}
	defer probe.Close()
	conn, err := db.dialSimple(ctx, db.writersApp)
	if err != nil {
		return run, err
	}
	defer conn.Close(context.Background())
	channel := db.Schema
	rel, err := e.startRelay(ctx, db, topic, channel, cfg.Relay, log)
	if err != nil {
		return run, err
	}
	defer rel.Stop()
	relayPid := 0
	if p, ok := rel.(*relayProc); ok {
		relayPid = p.Pid()
	}
	tr, err := startTracker(ctx, e.Brokers, topic, ids, log)
	if err != nil {
		return run, err
	}
	defer tr.Stop()
	w, err := outbox.NewWriter(outbox.WriterConfig{Channel: channel})
	if err != nil {
		return run, err
	}
	body := payload(cfg.PayloadBytes)
	event := func(j int) outbox.Event {
		return outbox.Event{ID: ids[j], AggregateID: fmt.Sprintf("agg-%d", j%cfg.Aggregates), Type: "bench.event", Payload: body}
	}
	if err := warmUp(ctx, &dbSender{db: db, writer: w}, tr, event, 2*n, warm, time.Minute); err != nil {
		return run, err
	}
	db.Pool.Close() // the warm-up's connections exit (and flush) now
	if probe.flush {
		if _, err := conn.Exec(ctx, flushSQL); err != nil { // its start-up
			return run, fmt.Errorf("bench: burst: %w", err)
		}
	}

	// The idle period and its cost.
	idleStart := time.Now()
	e.Progress.Begin(fmt.Sprintf("burst: idle %s", cfg.Idle), func() string {
		return fmt.Sprintf("idle %.0fs", time.Since(idleStart).Seconds())
	})
	if err := waitCtx(ctx, cfg.IdleSettle); err != nil {
		return run, err
	}
	i0, err := probe.Sample(ctx, relayPid)
	if err != nil {
		return run, err
	}
	r0 := rel.Stats()
	if err := waitCtx(ctx, time.Until(idleStart.Add(cfg.Idle))); err != nil {
		return run, err
	}
	r1 := rel.Stats()
	i1, err := probe.Sample(ctx, relayPid)
	if err != nil {
		return run, err
	}
	e.Progress.End()
	idle := probe.delta(i0, i1, 0)
	b.IdleCostWindowS = idle.seconds
	if idle.seconds > 0 {
		b.IdleDBXactsPerS = float64(idle.xacts) / idle.seconds
		b.IdleWALBytesPerS = float64(idle.wal) / idle.seconds
		b.IdleCostClaimsPerS = float64(r1.sub(r0).Claims) / idle.seconds
		if !math.IsNaN(idle.dbCPU) {
			b.IdleDBCPUSPer10S = f64(idle.dbCPU * 10 / idle.seconds)
		}
		if !math.IsNaN(idle.relayCPU) {
			b.IdleRelayCPUSPer10S = f64(idle.relayCPU * 10 / idle.seconds)
		}
	}
	log.Info("idle cost", zap.Float64("xacts_per_s", b.IdleDBXactsPerS), zap.Float64("claims_per_s", b.IdleCostClaimsPerS))

	// burst inserts rows lo..hi in one transaction (before and
	// afterCommit run around it) and waits for them: the drain rate from
	// COMMIT to the last event, the time to the first, the INSERT's time.
	received := int64(warm)
	burst := func(name string, lo, hi int, before, afterCommit func() error) (rate, first float64, insert time.Duration, err error) {
		e.Progress.Begin("burst: "+name, func() string {
			return fmt.Sprintf("received %d/%d", tr.Distinct()-received, hi-lo+1)
		})
		defer e.Progress.End()
		if before != nil {
			if err := before(); err != nil {
				return 0, 0, 0, err
			}
		}
		tr.resetFirst()
		began := time.Now()
		if err := insertBurst(ctx, conn, prefix, lo, hi, cfg.Aggregates, cfg.PayloadBytes, channel, probe.flush); err != nil {
			return 0, 0, 0, err
		}
		committed := time.Now()
		if afterCommit != nil {
			if err := afterCommit(); err != nil {
				return 0, 0, 0, err
			}
		}
		want := received + int64(hi-lo+1)
		if !tr.waitFor(ctx, want, cfg.Timeout) {
			if p, ok := rel.(*relayProc); ok {
				if err := p.Exited(); err != nil {
					return 0, 0, 0, err
				}
			}
			return 0, 0, 0, fmt.Errorf("bench: burst %s: %d of %d events arrived within %s", name, tr.Distinct()-received, hi-lo+1, cfg.Timeout)
		}
		received = want
		last := time.Unix(0, tr.lastRecv.Load())
		if d := last.Sub(committed).Seconds(); d > 0 {
			rate = float64(hi-lo+1) / d
		}
		return rate, tr.firstSinceReset().Sub(committed).Seconds(), committed.Sub(began), nil
	}

	// The drain window opens when the first COMMIT returned (sampling
	// before it would count the INSERT as the relay's; the few ms it takes
	// are lost against a drain of about a second) and closes once the
	// relay has stopped; the second INSERT (s0..s1) is taken out of it.
	var c0, s0, s1 costSample
	rate, first, insert, err := burst(fmt.Sprintf("%d events after %s idle", n, cfg.Idle), 1, n, nil, func() error {
		var err error
		c0, err = probe.Sample(ctx, relayPid)
		return err
	})
	if err != nil {
		return run, err
	}
	b.AfterIdleEventsPerS, b.FirstEventS, b.InsertS = rate, first, insert.Seconds()
	lastA := time.Unix(0, tr.lastRecv.Load())
	if err := waitCtx(ctx, time.Until(lastA.Add(cfg.ShortIdle))); err != nil {
		return run, err
	}
	rate, first, _, err = burst(fmt.Sprintf("%d events after %s idle", n, cfg.ShortIdle), n+1, 2*n, func() error {
		var err error
		s0, err = probe.Sample(ctx, relayPid)
		return err
	}, func() error {
		var err error
		s1, err = probe.Sample(ctx, relayPid)
		return err
	})
	if err != nil {
		return run, err
	}
	b.AfterShortIdleEventsPerS, b.ShortFirstEventS = rate, first
	if b.AfterShortIdleEventsPerS > 0 {
		b.BurstRatio = b.AfterIdleEventsPerS / b.AfterShortIdleEventsPerS
	}
	d, err := e.closeCostWindow(ctx, probe, c0, db, rel)
	if err != nil {
		return run, err
	}
	tr.Stop()
	b.BurstReceived = tr.Distinct() - warm
	b.BurstDuplicates = tr.duplicates.Load()
	run.DurationS = time.Since(idleStart).Seconds()
	run.Cost = d.minus(probe.delta(s0, s1, 0)).cost(2 * int64(n))
	run.Cost.Attribute(nil, BaselineNone)
	return run, nil
}
