package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/claim"
)

// Scenario names of the scale scenario (Env.Scale).
const (
	// ScenarioScaleDrain: a backlog preloaded with no relay running, then
	// Relays relay processes started together; events/s until the last
	// event arrived.
	ScenarioScaleDrain = "scale-drain"
	// ScenarioScaleBurst: Relays relay processes running and settled (each
	// owns its share of the key partitions), then one transaction inserts
	// the events and notifies; events/s from its COMMIT to the last event.
	ScenarioScaleBurst = "scale-burst"
	// ScenarioScaleLatency: steady traffic (ScaleConfig.LatencyRate over
	// LatencyAggregates aggregates) with Relays relay processes, settled:
	// commit-to-publish latency against one relay's.
	ScenarioScaleLatency = "scale-latency"
	// ScenarioScale selects all three in SuiteConfig.Scenarios.
	ScenarioScale = "scale"
)

// ScaleConfig configures the scale scenario: how several relays on one
// table compare with one, on a drain and on a burst, at several numbers
// of aggregates.
type ScaleConfig struct {
	// Relay configures the relay processes (Mode is set to ModeNotifyProc;
	// ProcDefaults keeps the product's defaults).
	Relay RelayConfig
	// Relays are the relay counts. Defaults to 1, 2, 3; the first should
	// be 1, the count the ratios divide by.
	Relays []int
	// Aggregates are the numbers of distinct aggregate IDs. Defaults to
	// 100, 1000, 100000.
	Aggregates []int
	// Events is the events of each drain's backlog and of each burst's
	// transaction. Defaults to 100000.
	Events int
	// Kinds are ScenarioScaleDrain and ScenarioScaleBurst, run in that
	// order for each aggregate count, and ScenarioScaleLatency, run once
	// after them. Defaults to all three.
	Kinds []string
	// LatencyRate is the scale-latency runs' arrival rate, events/s.
	// Defaults to 2000.
	LatencyRate float64
	// LatencyAggregates is the scale-latency runs' number of aggregates.
	// Defaults to 100.
	LatencyAggregates int
	// LatencyDuration is how long each scale-latency run sends. Defaults
	// to 20s.
	LatencyDuration time.Duration
	// PayloadBytes is the approximate JSON payload size in bytes. Defaults
	// to 100.
	PayloadBytes int
	// SettleTimeout bounds the wait, before a burst, for the relays'
	// ownership to settle. Defaults to 1m.
	SettleTimeout time.Duration
	// Timeout bounds each drain. Defaults to 5m.
	Timeout time.Duration
	// Partitions is the partition count of the runs' topics (Env.Partitions
	// for the other scenarios): several relays publish to several
	// partitions, as they would in production. Defaults to 12.
	Partitions int32
	// Rounds is how many times each drain and burst runs per relay count,
	// the relay counts interleaved (1, 2, 3, 1, 2, 3, ...), so that a
	// slow moment of a shared machine does not decide a ratio alone; the
	// run reported for each relay count is its median by events/s, and
	// the ratios divide medians. Defaults to DefaultScaleRounds.
	Rounds int
}

// DefaultScaleRounds is ScaleConfig.Rounds' default: a drain of 100,000
// events takes 3-6 s on a 2-core machine, where one run's events/s
// varied by up to 2x between identical runs.
const DefaultScaleRounds = 3

func (c *ScaleConfig) validate() error {
	if len(c.Relays) == 0 {
		c.Relays = []int{1, 2, 3}
	}
	if len(c.Aggregates) == 0 {
		c.Aggregates = []int{100, 1000, 100000}
	}
	if c.Events == 0 {
		c.Events = 100000
	}
	if len(c.Kinds) == 0 {
		c.Kinds = []string{ScenarioScaleDrain, ScenarioScaleBurst, ScenarioScaleLatency}
	}
	if c.LatencyRate == 0 {
		c.LatencyRate = 2000
	}
	if c.LatencyAggregates == 0 {
		c.LatencyAggregates = 100
	}
	if c.LatencyDuration == 0 {
		c.LatencyDuration = 20 * time.Second
	}
	if c.PayloadBytes == 0 {
		c.PayloadBytes = 100
	}
	if c.SettleTimeout == 0 {
		c.SettleTimeout = time.Minute
	}
	if c.Timeout == 0 {
		c.Timeout = 5 * time.Minute
	}
	if c.Partitions == 0 {
		c.Partitions = 12
	}
	if c.Rounds == 0 {
		c.Rounds = DefaultScaleRounds
	}
	if c.Rounds < 0 || c.Rounds > 25 {
		return fmt.Errorf("bench: ScaleConfig.Rounds: must be 1..25, got %d", c.Rounds)
	}
	if c.Partitions < 0 {
		return fmt.Errorf("bench: ScaleConfig.Partitions: must be positive, got %d", c.Partitions)
	}
	for _, n := range c.Relays {
		if n < 1 || n > 16 {
			return fmt.Errorf("bench: ScaleConfig.Relays: must be 1..16, got %d", n)
		}
	}
	for _, a := range c.Aggregates {
		if a < 1 {
			return fmt.Errorf("bench: ScaleConfig.Aggregates: must be positive, got %d", a)
		}
	}
	for _, k := range c.Kinds {
		if k != ScenarioScaleDrain && k != ScenarioScaleBurst && k != ScenarioScaleLatency {
			return fmt.Errorf("bench: ScaleConfig.Kinds: %q is not %s, %s or %s", k, ScenarioScaleDrain, ScenarioScaleBurst, ScenarioScaleLatency)
		}
	}
	switch {
	case c.Events < 1 || c.Events > 50e6:
		return fmt.Errorf("bench: ScaleConfig.Events: must be 1..50000000, got %d", c.Events)
	case c.PayloadBytes < 0 || c.PayloadBytes > outbox.DefaultMaxRecordBytes:
		return fmt.Errorf("bench: ScaleConfig.PayloadBytes: must be 1..%d, got %d", outbox.DefaultMaxRecordBytes, c.PayloadBytes)
	case c.SettleTimeout < 0 || c.Timeout < 0 || c.LatencyDuration < 0:
		return errors.New("bench: ScaleConfig: durations must be positive")
	case !(c.LatencyRate > 0) || math.IsInf(c.LatencyRate, 0):
		return fmt.Errorf("bench: ScaleConfig.LatencyRate: must be positive, got %v", c.LatencyRate)
	case c.LatencyAggregates < 0:
		return fmt.Errorf("bench: ScaleConfig.LatencyAggregates: must be positive, got %d", c.LatencyAggregates)
	}
	c.Relay.Mode = ModeNotifyProc
	return c.Relay.validate()
}

// Scale is what a scale run adds to its Drain figures.
type Scale struct {
	// Aggregates is the number of distinct aggregate IDs of the events.
	Aggregates int `json:"aggregates"`
	// RatioToOneRelay is this run's EventsPerS over the one-relay run's of
	// the same kind and aggregates; 0 when that run is missing or failed.
	RatioToOneRelay float64 `json:"ratio_to_one_relay"`
	// SettleS (bursts) is how long the relays took, from their start, to
	// settle their ownership of the key partitions.
	SettleS float64 `json:"settle_s,omitempty"`
	// P99RatioToOneRelay (scale-latency) is this run's p99 latency over
	// the one-relay run's; 0 when that run is missing or failed.
	P99RatioToOneRelay float64 `json:"p99_ratio_to_one_relay,omitempty"`
	// ScaleFirstEventS (bursts) is the time from COMMIT to the first event
	// received, in seconds.
	ScaleFirstEventS float64 `json:"scale_first_event_s,omitempty"`
	// RoundsEventsPerS (drains and bursts) is the events/s of every round
	// of this relay count, in the order they ran; the run reported is the
	// median of the successful ones (ScaleConfig.Rounds).
	RoundsEventsPerS []float64 `json:"rounds_events_per_s,omitempty"`
}

// Scale runs the scale scenario: for each aggregate count and kind, one
// run per relay count (notify-proc relays on a fresh table each), and
// sets every run's ratio to the one-relay run. A failed run is returned
// with its Error set and does not stop the others; the error is that of
// ctx only.
func (e *Env) Scale(ctx context.Context, cfg ScaleConfig) ([]Run, error) {
	if err := e.validate(); err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	se := *e // the same environment, with the scale runs' topic partitions
	se.Partitions = cfg.Partitions
	e = &se
	var runs []Run
	for _, aggs := range cfg.Aggregates {
		for _, kind := range cfg.Kinds {
			if kind == ScenarioScaleLatency {
				continue
			}
			first := len(runs)
			byRelays := map[int][]Run{}
			for round := range cfg.Rounds {
				for _, n := range cfg.Relays {
					r, err := e.scaleRun(ctx, cfg, kind, n, aggs)
					if err != nil {
						return append(runs, r), err
					}
					if r.Error != "" {
						e.Log.Warn("scale run failed", zap.String("scenario", kind), zap.Int("relays", n),
							zap.Int("aggregates", aggs), zap.Int("round", round+1), zap.String("error", r.Error))
					}
					byRelays[n] = append(byRelays[n], r)
				}
			}
			for _, n := range cfg.Relays {
				runs = append(runs, medianRun(byRelays[n]))
			}
			setScaleRatios(runs[first:])
		}
	}
	if slices.Contains(cfg.Kinds, ScenarioScaleLatency) {
		first := len(runs)
		for _, n := range cfg.Relays {
			r, err := e.Latency(ctx, LatencyConfig{
				Mode: ModeNotifyProc, Scenario: ScenarioScaleLatency, Relay: cfg.Relay, Relays: n,
				Rate: cfg.LatencyRate, Duration: cfg.LatencyDuration, Aggregates: cfg.LatencyAggregates,
				Writers: writersFor(cfg.LatencyRate, 8), PayloadBytes: cfg.PayloadBytes,
			})
			r.Scenario, r.Mode = ScenarioScaleLatency, ModeNotifyProc
			if r.Latency == nil {
				r.Latency = &Latency{Rate: cfg.LatencyRate}
			}
			r.LatencyRelays = n
			r.Scale = &Scale{Aggregates: cfg.LatencyAggregates}
			if err != nil {
				if ctx.Err() != nil {
					return runs, ctx.Err()
				}
				r.Error = err.Error()
				e.Log.Warn("scale-latency run failed", zap.Int("relays", n), zap.Error(err))
			}
			runs = append(runs, r)
		}
		lat := runs[first:]
		if i := slices.IndexFunc(lat, func(r Run) bool { return r.LatencyRelays == 1 && r.Error == "" && r.P99MS > 0 }); i >= 0 {
			for j := range lat {
				if lat[j].Error == "" && lat[j].P99MS > 0 {
					lat[j].P99RatioToOneRelay = lat[j].P99MS / lat[i].P99MS
				}
			}
		}
	}
	return runs, nil
}

// scaleRun is one drain or burst of kind with n relays over aggs
// aggregates. A failed run comes back with its Error set; the error is
// that of ctx only.
func (e *Env) scaleRun(ctx context.Context, cfg ScaleConfig, kind string, n, aggs int) (Run, error) {
	var r Run
	var err error
	if kind == ScenarioScaleDrain {
		r, err = e.Drain(ctx, DrainConfig{
			Mode: ModeNotifyProc, Relay: cfg.Relay, Relays: n, Events: cfg.Events,
			Aggregates: aggs, PayloadBytes: cfg.PayloadBytes, SQLPreload: true,
			Scenario: ScenarioScaleDrain, Timeout: cfg.Timeout,
		})
	} else {
		r, err = e.scaleBurst(ctx, cfg, n, aggs)
	}
	if r.Drain == nil {
		r.Drain = &Drain{Relays: n, Events: int64(cfg.Events)}
	}
	r.Scenario, r.Mode = kind, ModeNotifyProc
	if r.Scale == nil {
		r.Scale = &Scale{}
	}
	r.Scale.Aggregates = aggs
	if err != nil {
		if ctx.Err() != nil {
			return r, ctx.Err()
		}
		r.Error = err.Error()
	}
	return r, nil
}

// medianRun is the median by events/s of the successful rounds of one
// relay count (the lower middle one of an even number), with every
// round's events/s in RoundsEventsPerS; the first round if none
// succeeded.
func medianRun(rounds []Run) Run {
	var all []float64
	var ok []Run
	for _, r := range rounds {
		all = append(all, r.EventsPerS)
		if r.Error == "" && r.EventsPerS > 0 {
			ok = append(ok, r)
		}
	}
	m := rounds[0]
	if len(ok) > 0 {
		slices.SortStableFunc(ok, func(a, b Run) int { return cmp.Compare(a.EventsPerS, b.EventsPerS) })
		m = ok[(len(ok)-1)/2]
	}
	if len(rounds) > 1 {
		m.Scale.RoundsEventsPerS = all
	}
	return m
}

// setScaleRatios sets RatioToOneRelay of runs (one kind and aggregate
// count) against the successful one-relay run among them.
func setScaleRatios(runs []Run) {
	i := slices.IndexFunc(runs, func(r Run) bool { return r.Drain.Relays == 1 && r.Error == "" && r.EventsPerS > 0 })
	if i < 0 {
		return
	}
	one := runs[i].EventsPerS
	for j := range runs {
		if runs[j].Error == "" && runs[j].EventsPerS > 0 {
			runs[j].RatioToOneRelay = runs[j].EventsPerS / one
		}
	}
}

// scaleBurst is one scale-burst run: n relay processes start on a fresh
// table and settle their ownership, a few warm-up events pass, then one
// transaction inserts cfg.Events events over aggs aggregates and notifies.
// Run.Cost covers the time from that COMMIT until the relays stopped,
// over cfg.Events events.
func (e *Env) scaleBurst(ctx context.Context, cfg ScaleConfig, n, aggs int) (Run, error) {
	log := e.Log.Named("scale-burst")
	run := Run{Scenario: ScenarioScaleBurst, Mode: ModeNotifyProc, Drain: &Drain{Relays: n, Events: int64(cfg.Events)}, Scale: &Scale{Aggregates: aggs}}
	label := fmt.Sprintf("scale-burst x%d, %d aggregates", n, aggs)
	db, err := e.freshDB(ctx, 2)
	if err != nil {
		return run, err
	}
	defer db.Close()
	topic, err := e.freshTopic(ctx, "scale")
	if err != nil {
		return run, err
	}
	defer e.dropTopic(topic)
	const warm = 10
	prefix := randHex(4)
	ids := burstIDs(prefix, 1, cfg.Events)
	for range warm {
		ids = append(ids, outbox.NewID())
	}
	tr, err := startTracker(ctx, e.Brokers, topic, ids, log)
	if err != nil {
		return run, err
	}
	defer tr.Stop()
	probe, err := newCostProbe(ctx, e.DSN)
	if err != nil {
		return run, err
	}
	defer probe.Close()
	conn, err := db.dialSimple(ctx, db.writersApp)
	if err != nil {
		return run, err
	}
	defer conn.Close(context.WithoutCancel(ctx))

	channel := db.Schema
	started := time.Now()
	var procs []*relayProc
	defer func() {
		for _, p := range procs {
			p.Stop()
		}
	}()
	for i := range n {
		p, err := e.startRelayProc(db, topic, channel, cfg.Relay, log.Named(fmt.Sprint(i)))
		if err != nil {
			return run, err
		}
		procs = append(procs, p)
	}
	e.Progress.Begin(label+": settle", func() string { return fmt.Sprintf("%.0fs", time.Since(started).Seconds()) })
	err = waitSettled(ctx, db, n, cfg.SettleTimeout, func() error {
		for _, p := range procs {
			if err := p.Exited(); err != nil {
				return err
			}
		}
		return nil
	})
	e.Progress.End()
	if err != nil {
		return run, err
	}
	run.SettleS = time.Since(started).Seconds()

	w, err := outbox.NewWriter(outbox.WriterConfig{Channel: channel})
	if err != nil {
		return run, err
	}
	body := payload(cfg.PayloadBytes)
	event := func(j int) outbox.Event {
		return outbox.Event{ID: ids[j], AggregateID: fmt.Sprintf("agg-%d", j%aggs), Type: "bench.event", Payload: body}
	}
	if err := warmUp(ctx, &dbSender{db: db, writer: w}, tr, event, cfg.Events, warm, time.Minute); err != nil {
		return run, err
	}
	db.Pool.Close() // the warm-up's connections exit (and flush) now
	if probe.flush {
		if _, err := conn.Exec(ctx, flushSQL); err != nil {
			return run, fmt.Errorf("bench: scale-burst: %w", err)
		}
	}

	e.Progress.Begin(label, func() string { return fmt.Sprintf("received %d/%d", tr.Distinct()-warm, cfg.Events) })
	defer e.Progress.End()
	tr.resetFirst()
	if err := insertBurst(ctx, conn, prefix, 1, cfg.Events, aggs, cfg.PayloadBytes, channel, probe.flush); err != nil {
		return run, err
	}
	committed := time.Now()
	c0, err := probe.Sample(ctx, 0)
	if err != nil {
		return run, err
	}
	cpu0 := procsCPU(procs)
	if !tr.waitFor(ctx, int64(warm+cfg.Events), cfg.Timeout) {
		for _, p := range procs {
			if err := p.Exited(); err != nil {
				return run, err
			}
		}
		return run, fmt.Errorf("bench: scale-burst: %d of %d events arrived within %s", tr.Distinct()-warm, cfg.Events, cfg.Timeout)
	}
	last := time.Unix(0, tr.lastRecv.Load())
	run.DurationS = last.Sub(committed).Seconds()
	if run.DurationS > 0 {
		run.EventsPerS = float64(cfg.Events) / run.DurationS
	}
	run.ScaleFirstEventS = tr.firstSinceReset().Sub(committed).Seconds()
	relayCPU := procsCPU(procs) - cpu0
	for _, p := range procs {
		run.Claims += p.Stats().Claims
		_, hwm := procMemMiB(p.Pid())
		run.RelayVmHWMMiB = max(run.RelayVmHWMMiB, hwm)
	}
	if err := stopAndWait(ctx, probe, db.relayApp, func() {
		for _, p := range procs {
			p.Stop()
		}
	}); err != nil {
		return run, err
	}
	procs = nil
	c1, err := probe.Sample(ctx, 0)
	if err != nil {
		return run, err
	}
	d := probe.delta(c0, c1, 0)
	d.relayCPU = relayCPU
	run.Cost = d.cost(int64(cfg.Events))
	run.Cost.Attribute(nil, BaselineNone)
	tr.Stop()
	run.Received = tr.Distinct() - warm
	run.DuplicateReceptions = tr.duplicates.Load()
	log.Debug("burst drained", zap.Int("relays", n), zap.Int("aggregates", aggs), zap.Float64("events_per_s", run.EventsPerS))
	return run, nil
}

// procsCPU is the CPU seconds of procs, NaN if one cannot be read.
func procsCPU(procs []*relayProc) float64 {
	sum := 0.0
	for _, p := range procs {
		v, err := p.CPUSeconds()
		if err != nil {
			return math.NaN()
		}
		sum += v
	}
	return sum
}

// waitSettled waits until n relays are live on db's outbox table and own
// the key partitions as Assign gives them (claim.Owners.Settled), or
// exited returns an error (a relay process exited), or timeout passed.
func waitSettled(ctx context.Context, db *runDB, n int, timeout time.Duration, exited func() error) error {
	deadline := time.Now().Add(timeout)
	var last *claim.Owners
	for {
		o, err := claim.ReadOwners(ctx, db.Pool, "outbox")
		if err == nil {
			live := 0
			for _, m := range o.Relays {
				if m.Live {
					live++
				}
			}
			if live == n && o.Settled() {
				return nil
			}
			last = o
		}
		if err := exited(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: %d relays did not settle their ownership within %s (last: %+v, %v)", n, timeout, last, err)
		}
		if err := waitCtx(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}
