package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/lease"
)

// DrainConfig configures a drain run.
type DrainConfig struct {
	// Mode is ModeNotify, ModePoll, ModeNaive, ModeNotifyProc (notify
	// relays as child processes of Env.RelayBin), ModeNotifyProcB (the
	// same with Env.RelayBinB) or ModeSQLCeiling.
	// Required.
	Mode string
	// Relay configures the relays (Relay.Mode is set from Mode; for
	// sql-ceiling only BatchSize and Lease are used).
	Relay RelayConfig
	// Relays is the number of relays (claim loops for sql-ceiling) run at
	// once, each with its own pool and Kafka client. Defaults to 1.
	Relays int
	// Events is the backlog preloaded before the relays start. Defaults to
	// 200000.
	Events int
	// PreloadBatch is the number of events per preload transaction (one
	// outbox.Writer.Add call each). Defaults to 5000.
	PreloadBatch int
	// PayloadBytes is the approximate JSON payload size in bytes. Defaults
	// to 100.
	PayloadBytes int
	// Aggregates is the number of distinct aggregate IDs. Defaults to 1000.
	Aggregates int
	// Timeout bounds the drain itself. Defaults to 10m.
	Timeout time.Duration
	// Scenario is the run's "scenario" key. Defaults to ScenarioDrain.
	Scenario string
	// SQLPreload preloads with INSERT ... SELECT FROM generate_series
	// (PreloadBatch rows per statement, default 100000 then) instead of
	// the writer API: how a large backlog is built fast. Defaults to false.
	SQLPreload bool
	// NoCost skips the cost measurement (Run.Cost). Defaults to false.
	NoCost bool
}

func (c *DrainConfig) validate() error {
	if c.Relays == 0 {
		c.Relays = 1
	}
	if c.Events == 0 {
		c.Events = 200000
	}
	if c.PreloadBatch == 0 {
		c.PreloadBatch = 5000
		if c.SQLPreload {
			c.PreloadBatch = 100000
		}
	}
	if c.Scenario == "" {
		c.Scenario = ScenarioDrain
	}
	if c.PayloadBytes == 0 {
		c.PayloadBytes = 100
	}
	if c.Aggregates == 0 {
		c.Aggregates = 1000
	}
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Minute
	}
	switch {
	case c.Relays < 0 || c.Relays > 64:
		return fmt.Errorf("bench: DrainConfig.Relays: must be 1..64, got %d", c.Relays)
	case c.Events < 0:
		return fmt.Errorf("bench: DrainConfig.Events: must be positive, got %d", c.Events)
	case c.PreloadBatch < 0:
		return fmt.Errorf("bench: DrainConfig.PreloadBatch: must be positive, got %d", c.PreloadBatch)
	case c.PayloadBytes < 0 || c.PayloadBytes > outbox.DefaultMaxRecordBytes:
		return fmt.Errorf("bench: DrainConfig.PayloadBytes: must be 1..%d, got %d", outbox.DefaultMaxRecordBytes, c.PayloadBytes)
	case c.Aggregates < 0:
		return fmt.Errorf("bench: DrainConfig.Aggregates: must be positive, got %d", c.Aggregates)
	case c.Timeout < 0:
		return fmt.Errorf("bench: DrainConfig.Timeout: must be positive, got %s", c.Timeout)
	}
	switch c.Mode {
	case ModeSQLCeiling:
		c.Relay.Mode = ModePoll // only to apply defaults
	case ModeNotifyProc, ModeNotifyProcB:
		c.Relay.Mode = c.Mode
	default:
		c.Relay.Mode = c.Mode
	}
	if c.Mode == ModeNotifyEveryTx {
		return fmt.Errorf("bench: DrainConfig.Mode: %s is a latency mode only", c.Mode)
	}
	if err := c.Relay.validate(); err != nil {
		if c.Mode != ModeSQLCeiling {
			return err
		}
		return fmt.Errorf("bench: DrainConfig.Mode: %q is not notify, poll, naive, notify-proc, notify-proc-b or sql-ceiling", c.Mode)
	}
	return nil
}

// Drain runs the drain scenario for one mode: it preloads cfg.Events rows
// with no relay running, starts cfg.Relays relays and measures until the
// consumer has every event (for sql-ceiling: until a raw claim+mark loop,
// the statements of package lease without Kafka, finds no more rows). With
// notify-proc the relays are `outbox-relay run` processes (Env.RelayBin)
// whose VmRSS is sampled every 100ms; their start-up is inside the
// measured time. Unless cfg.NoCost, Run.Cost covers the relays from
// before they start until they stopped, over cfg.Events events, all of it
// the relays' (no writer runs meanwhile).
func (e *Env) Drain(ctx context.Context, cfg DrainConfig) (Run, error) {
	if err := e.validate(); err != nil {
		return Run{}, err
	}
	if err := cfg.validate(); err != nil {
		return Run{}, err
	}
	log := e.Log.Named("drain").Named(cfg.Mode)
	run := Run{Scenario: cfg.Scenario, Mode: cfg.Mode, Drain: &Drain{Relays: cfg.Relays, Events: int64(cfg.Events)}}
	db, err := e.freshDB(ctx, 4)
	if err != nil {
		return run, err
	}
	defer db.Close()

	var ids []uuid.UUID
	prefix := randHex(4)
	if cfg.SQLPreload {
		ids = burstIDs(prefix, 1, cfg.Events)
	} else {
		ids = make([]uuid.UUID, cfg.Events)
		for i := range ids {
			ids[i] = outbox.NewID()
		}
	}
	label := fmt.Sprintf("%s %s x%d", cfg.Scenario, cfg.Mode, cfg.Relays)
	t0 := time.Now()
	if cfg.SQLPreload {
		err = preloadSQL(ctx, db, prefix, cfg, e.Progress, label)
	} else {
		err = preload(ctx, db, ids, cfg, e.Progress, label)
	}
	if err != nil {
		return run, err
	}
	run.PreloadEventsPerS = float64(cfg.Events) / time.Since(t0).Seconds()
	// A backlog that built up over time would have been analyzed by
	// autovacuum (the table's analyze scale factor is 1%).
	if _, err := db.Pool.Exec(ctx, "VACUUM ANALYZE outbox"); err != nil {
		return run, fmt.Errorf("bench: analyze: %w", err)
	}

	var tr *tracker
	topic := ""
	if cfg.Mode != ModeSQLCeiling {
		if topic, err = e.freshTopic(ctx, "drain-"+cfg.Mode); err != nil {
			return run, err
		}
		defer e.dropTopic(topic)
		if tr, err = startTracker(ctx, e.Brokers, topic, ids, log); err != nil {
			return run, err
		}
		defer tr.Stop()
	}

	// Memory: return the preload's garbage to the OS, reset the peak and
	// sample RSS while the relays run.
	debug.FreeOSMemory()
	hwmReset := resetPeakRSS()
	var rssMax atomic.Uint64
	stopSampler := make(chan struct{})
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			rss, _ := rssMB()
			if v := uint64(rss * 1024); v > rssMax.Load() {
				rssMax.Store(v)
			}
			select {
			case <-stopSampler:
				return
			case <-t.C:
			}
		}
	}()

	var probe *costProbe
	var c0 costSample
	if !cfg.NoCost {
		if probe, err = e.openCostProbe(ctx); err != nil {
			return run, err
		}
		defer probe.Close()
		// The preload's and VACUUM's statistics are counted before c0.
		if _, err := probe.flushPool(ctx, db.Pool); err != nil {
			return run, err
		}
		if c0, err = probe.Sample(ctx, 0); err != nil {
			return run, err
		}
	}
	var relayCPU float64 // relay processes' CPU seconds (notify-proc)
	var marked, claims atomic.Int64
	e.Progress.Begin(label, func() string {
		if tr != nil {
			return fmt.Sprintf("received %d/%d", tr.Distinct(), cfg.Events)
		}
		return fmt.Sprintf("marked %d/%d", marked.Load(), cfg.Events)
	})
	dctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	start := time.Now()
	var end time.Time
	var runErr error
	if cfg.Mode == ModeSQLCeiling {
		end, runErr = sqlCeiling(dctx, db, cfg, &marked, &claims)
	} else if notifyProc(cfg.Mode) {
		end, relayCPU, runErr = e.drainProc(dctx, db, topic, tr, cfg, &run, probe, log)
		claims.Store(run.Claims)
		tr.Stop()
		run.Received = tr.Distinct()
		run.DuplicateReceptions = tr.duplicates.Load()
	} else {
		var rels []runningRelay
		for i := range cfg.Relays {
			r, err := e.startRelay(ctx, db, topic, db.Schema, cfg.Relay, log.Named(fmt.Sprint(i)))
			if err != nil {
				runErr = err
				break
			}
			rels = append(rels, r)
		}
		if runErr == nil {
			if !tr.waitFor(dctx, int64(cfg.Events), cfg.Timeout) {
				runErr = fmt.Errorf("bench: drain: %d of %d events arrived within %s", tr.Distinct(), cfg.Events, cfg.Timeout)
			}
			end = time.Unix(0, tr.lastRecv.Load())
		}
		for _, r := range rels {
			claims.Add(r.Stats().Claims)
		}
		if err := stopAndWait(ctx, probe, db.relayApp, func() {
			for _, r := range rels {
				r.Stop()
			}
		}); err != nil && runErr == nil {
			runErr = err
		}
		tr.Stop()
		run.Received = tr.Distinct()
		run.DuplicateReceptions = tr.duplicates.Load()
	}
	e.Progress.End()
	close(stopSampler)
	<-samplerDone
	rss, hwm := rssMB()
	if v := float64(rssMax.Load()) / 1024; v > rss {
		rss = v
	}
	run.RSSMaxMB = rss
	if hwmReset {
		run.VmHWMMB = hwm
	}
	run.Claims = claims.Load()
	if runErr != nil {
		return run, runErr
	}
	if probe != nil {
		flushed, err := probe.flushPool(ctx, db.Pool) // sql-ceiling's claim loops
		if err != nil {
			return run, err
		}
		c1, err := probe.Sample(ctx, 0)
		if err != nil {
			return run, err
		}
		d := probe.delta(c0, c1, flushed)
		if notifyProc(cfg.Mode) {
			d.relayCPU = relayCPU
		}
		run.Cost = d.cost(int64(cfg.Events))
		run.Cost.Attribute(nil, BaselineNone)
	}
	run.DurationS = end.Sub(start).Seconds()
	if run.DurationS > 0 {
		run.EventsPerS = float64(cfg.Events) / run.DurationS
	}
	log.Debug("drained", zap.Float64("events_per_s", run.EventsPerS))
	return run, nil
}

// drainProc runs the drain with cfg.Relays relay processes and fills the
// relay_* figures of run (and its Claims); it returns when the last event
// arrived, with the processes' CPU time in seconds (read before they were
// stopped). The processes are stopped, and with probe their server
// processes gone, when it returns.
func (e *Env) drainProc(ctx context.Context, db *runDB, topic string, tr *tracker, cfg DrainConfig, run *Run, probe *costProbe, log *zap.Logger) (time.Time, float64, error) {
	start := time.Now()
	var procs []*relayProc
	var samplers []*rssSampler
	stopped := false
	stopAll := func() error {
		if stopped {
			return nil
		}
		stopped = true
		return stopAndWait(context.WithoutCancel(ctx), probe, db.relayApp, func() {
			for i, p := range procs {
				samplers[i].Stop()
				p.Stop()
			}
		})
	}
	defer func() { _ = stopAll() }()
	for i := range cfg.Relays {
		p, err := e.startRelayProc(db, topic, db.Schema, cfg.Relay, log.Named(fmt.Sprint(i)))
		if err != nil {
			return time.Time{}, 0, err
		}
		procs = append(procs, p)
		samplers = append(samplers, startRSSSampler(p.Pid(), 1, 100*time.Millisecond))
	}
	deadline := time.Now().Add(cfg.Timeout)
	var first time.Time
	for tr.Distinct() < int64(cfg.Events) {
		if first.IsZero() && tr.Distinct() > 0 {
			first = time.Now()
		}
		for _, p := range procs {
			if err := p.Exited(); err != nil {
				return time.Time{}, 0, err
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return time.Time{}, 0, fmt.Errorf("bench: drain: %d of %d events arrived within %s", tr.Distinct(), cfg.Events, cfg.Timeout)
		}
		time.Sleep(time.Millisecond)
	}
	end := time.Unix(0, tr.lastRecv.Load())
	if first.IsZero() {
		first = end
	}
	run.RelayStartS = first.Sub(start).Seconds()
	cpu := 0.0
	for i, p := range procs {
		samplers[i].Stop()
		run.RelayRSSMaxMiB = max(run.RelayRSSMaxMiB, samplers[i].Max(0))
		_, hwm := procMemMiB(p.Pid())
		run.RelayVmHWMMiB = max(run.RelayVmHWMMiB, hwm)
		run.Claims += p.Stats().Claims
		if v, err := p.CPUSeconds(); err == nil {
			cpu += v
		}
	}
	return end, cpu, stopAll()
}

// stopAndWait runs stop (which closes the connections of the relays
// named app) and, with a probe, waits until their server processes have
// exited, so that their statistics are counted.
func stopAndWait(ctx context.Context, probe *costProbe, app string, stop func()) error {
	if probe == nil {
		stop()
		return nil
	}
	pids, err := probe.backends(ctx, app)
	if err != nil {
		stop()
		return err
	}
	stop()
	return probe.waitGone(ctx, pids, 20*time.Second)
}

// preloadSQL inserts cfg.Events rows with INSERT ... SELECT FROM
// generate_series (burstInsertSQL's IDs with prefix), cfg.PreloadBatch rows
// per statement, from two connections.
func preloadSQL(ctx context.Context, db *runDB, prefix string, cfg DrainConfig, p *Progress, label string) error {
	var next, done atomic.Int64
	p.Begin(label+" preload", func() string { return fmt.Sprintf("inserted %d/%d", done.Load(), cfg.Events) })
	defer p.End()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for g := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				lo := int(next.Add(int64(cfg.PreloadBatch))) - cfg.PreloadBatch + 1
				if lo > cfg.Events {
					return
				}
				hi := min(lo+cfg.PreloadBatch-1, cfg.Events)
				if _, err := db.Pool.Exec(ctx, burstInsertSQL, prefix, lo, hi, cfg.Aggregates, padFor(cfg.PayloadBytes)); err != nil {
					errs[g] = fmt.Errorf("bench: preload: %w", err)
					return
				}
				done.Add(int64(hi - lo + 1))
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// preload inserts ids through outbox.Writer (WakeupNone) in transactions of
// cfg.PreloadBatch events, from two goroutines.
func preload(ctx context.Context, db *runDB, ids []uuid.UUID, cfg DrainConfig, p *Progress, label string) error {
	w, err := outbox.NewWriter(outbox.WriterConfig{Wakeup: outbox.WakeupNone})
	if err != nil {
		return err
	}
	body := payload(cfg.PayloadBytes)
	var next, done atomic.Int64
	p.Begin(label+" preload", func() string { return fmt.Sprintf("inserted %d/%d", done.Load(), len(ids)) })
	defer p.End()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for g := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			evs := make([]outbox.Event, 0, cfg.PreloadBatch)
			for {
				lo := int(next.Add(int64(cfg.PreloadBatch))) - cfg.PreloadBatch
				if lo >= len(ids) {
					return
				}
				hi := min(lo+cfg.PreloadBatch, len(ids))
				evs = evs[:0]
				for j := lo; j < hi; j++ {
					evs = append(evs, outbox.Event{ID: ids[j], AggregateID: fmt.Sprintf("agg-%d", j%cfg.Aggregates), Type: "bench.event", Payload: body})
				}
				// One Add per transaction: the rows of a call get
				// consecutive seq values.
				if err := w.Add(ctx, db.Pool, evs...); err != nil {
					errs[g] = fmt.Errorf("bench: preload: %w", err)
					return
				}
				done.Add(int64(hi - lo))
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// sqlCeiling runs cfg.Relays loops of claim.Claimer Claim + MarkPublished
// (no Kafka), each its own member owning its share of the key partitions,
// until every row is marked, and returns when the last row was marked.
func sqlCeiling(ctx context.Context, db *runDB, cfg DrainConfig, marked, claims *atomic.Int64) (time.Time, error) {
	var wg sync.WaitGroup
	errs := make([]error, cfg.Relays)
	var lastMark atomic.Int64
	for i := range cfg.Relays {
		c, err := claim.New(db.Pool, lease.Config{Lease: cfg.Relay.Lease, BatchSize: cfg.Relay.BatchSize})
		if err != nil {
			return time.Time{}, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				b, err := c.Claim(ctx)
				claims.Add(1)
				if err != nil {
					errs[i] = err
					return
				}
				if len(b.Rows) == 0 {
					// Another loop may hold the rest (its key
					// partitions), or this one has not acquired its
					// share yet: done only once every row is marked.
					if marked.Load() >= int64(cfg.Events) {
						return
					}
					time.Sleep(time.Millisecond)
					continue
				}
				seqs := make([]int64, len(b.Rows))
				for j := range b.Rows {
					seqs[j] = b.Rows[j].Seq
				}
				n, err := c.MarkPublished(ctx, b.Token, seqs)
				if err != nil {
					errs[i] = err
					return
				}
				c.Settled(b.Token, time.Time{}) // its partitions may be handed over
				marked.Add(n)
				lastMark.Store(time.Now().UnixNano())
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return time.Time{}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	if m := marked.Load(); m != int64(cfg.Events) {
		return time.Time{}, fmt.Errorf("bench: sql-ceiling: marked %d of %d rows", m, cfg.Events)
	}
	return time.Unix(0, lastMark.Load()), nil
}
