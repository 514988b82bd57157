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
)

// SuiteConfig selects what RunSuite runs.
type SuiteConfig struct {
	// Scenarios to run: latency, drain, writers, sweep, broker-down, burst
	// and backlog; they run in the order burst, latency, drain, backlog,
	// writers, sweep, broker-down (burst first: its idle cost is measured
	// on a quiet cluster). Defaults to latency, drain, writers.
	Scenarios []string
	// Modes for the latency scenario (notify, poll, naive, floor,
	// notify-proc, notify-proc-b, notify-every-tx); drain uses notify
	// (with each of DrainRelays), notify-proc, notify-proc-b and naive
	// (one relay) among them, plus sql-ceiling; sweep uses notify and
	// poll. notify-proc runs the relay as a child process (Env.RelayBin)
	// to measure its own RSS and CPU time; notify-proc-b is the same with
	// another binary (Env.RelayBinB), for an A/B of two builds;
	// notify-every-tx too, with its claim window off and writers
	// notifying in every transaction (latency only). Defaults to notify,
	// poll, naive and floor.
	Modes []string
	// PollIntervals are the poll intervals of the poll and naive modes
	// (one run each) and the sweep's first axis. Defaults to [500ms].
	PollIntervals []time.Duration
	// Leases are the sweep's second axis; the first is used elsewhere.
	// Defaults to [30s].
	Leases []time.Duration
	// FallbackPoll is the notify relay's fallback poll interval outside
	// the sweep. Defaults to 500ms.
	FallbackPoll time.Duration
	// BatchSize is the relays' claim batch size. Defaults to 500.
	BatchSize int
	// ClaimWindow is the product relay's relay.Config.ClaimWindow: 0 keeps its
	// default (relay.DefaultClaimWindow), negative disables it.
	ClaimWindow time.Duration
	// ClaimWindowPoll is the product relay's relay.Config.ClaimWindowPoll:
	// 0 keeps its default (relay.DefaultClaimWindowPoll, 500µs). Longer
	// trades commit-to-publish latency for fewer claims (transactions and
	// database CPU) per event.
	ClaimWindowPoll time.Duration
	// BusyClaimInterval is the relays' relay.Config.BusyClaimInterval: 0
	// keeps their default (relay.DefaultBusyClaimInterval, 20ms). Shorter
	// trades the writers' CPU for latency above 2,000 events/s.
	BusyClaimInterval time.Duration
	// Latency is the template of every latency run (Mode and Relay are set
	// per run).
	Latency LatencyConfig
	// Rates are the latency scenario's arrival rates, events/s: every mode
	// runs at each, in order (rate by rate), with at least
	// max(Latency.Writers, rate/400) writers. Defaults to [Latency.Rate];
	// the sweep runs at Latency.Rate.
	Rates []float64
	// LatencyWriters are the writer kinds of the latency scenario's runs
	// (WriterGo, WriterPlainSQL, WriterPlainSQLAll), each run of a mode
	// once per kind, interleaved; the floor runs once. Defaults to
	// WriterGo alone.
	LatencyWriters []string
	// LatencyRounds is how many times the latency scenario runs its modes
	// at each rate, interleaved: the modes in order in the first round,
	// reversed in the second, and so on (A B, B A, A B ...), so that drift
	// on the machine weighs on every mode alike and the spread between
	// runs of one mode shows. Defaults to 1.
	LatencyRounds int
	// SweepDuration is each sweep run's duration. Defaults to
	// Latency.Duration.
	SweepDuration time.Duration
	// Drain is the template of drain runs (Mode and Relays set per run).
	Drain DrainConfig
	// DrainRelays are the relay counts of the drain runs. Defaults to
	// [1, 2].
	DrainRelays []int
	// Writers is the template of writers runs.
	Writers WritersConfig
	// Connections are the writers runs' connection counts. Defaults to
	// [16, 32, 64].
	Connections []int
	// WritersWakeup is the writers' wake-up mode in the writers runs with
	// wake-ups: debounced, every-tx or after-commit. Defaults to ""
	// (debounced, the writer's default).
	WritersWakeup string
	// BrokerDown is the template of the broker-down run (its Relay is
	// set from FallbackPoll, the first lease, BatchSize and ClaimWindow).
	BrokerDown BrokerDownConfig
	// ExtraRates are further arrival rates, events/s, of the latency
	// scenario for the product relay only (notify-proc if in Modes, else
	// notify; with notify-proc, notify-proc-b too if in Modes, after it),
	// e.g. [10000, 10]. Each such run has at least
	// max(Latency.Writers, rate/400) writers. Defaults to none.
	ExtraRates []float64
	// MinEvents makes every latency run last at least MinEvents/rate, so
	// that a low rate still gives percentiles (200 events at 10/s: 20s).
	// Defaults to 0: Latency.Duration only.
	MinEvents int
	// BaselineDuration is how long each writers-only baseline run writes
	// (one per rate, wake-up mode and writer count of the latency and
	// sweep runs). Defaults to Latency.Duration; negative: no baselines
	// (the relay's share of the cost is then not computed).
	BaselineDuration time.Duration
	// NoCost turns the cost measurement off (DB and relay CPU,
	// transactions, WAL) and with it the baselines. Defaults to false.
	NoCost bool
	// ProcFlags gives the relay processes of the latency (notify-proc),
	// burst and backlog runs the suite's relay settings (FallbackPoll,
	// first lease, BatchSize, ClaimWindow; retention off) instead of the
	// relay's own defaults. Defaults to false: the product's defaults.
	ProcFlags bool
	// Burst is the template of the burst run (idle cost and bursts).
	Burst BurstConfig
	// Backlog is the template of the backlog run: its Events (default
	// 1000000) are preloaded with INSERT ... SELECT and drained by one
	// relay process.
	Backlog DrainConfig
	// LargePayloads is the template of the large-payloads run: its Events
	// (default 2000) of PayloadBytes (default 900000) are preloaded with
	// INSERT ... SELECT, 100 per statement, and drained by one relay
	// process with its defaults; the run's relay peak RSS is the figure.
	LargePayloads DrainConfig
	// NotifyCostRates are the commit rates, per second, of the
	// notify-cost scenario (ScenarioNotifyCost): writers only, one run per
	// rate and writer wake-up mode, each lasting Latency.Duration (and
	// MinEvents). Defaults to DefaultNotifyCostRates (10, 1000, 10000).
	NotifyCostRates []float64
	// Deployed is the template of the deployed scenario
	// (ScenarioDeployed): 1 against several relay processes, plain-SQL
	// writers, idle, and a rolling restart. Its Latency template, Rounds
	// (unless set), BaselineDuration (unless set), NoCost and Relay come
	// from the suite's Latency, LatencyRounds, BaselineDuration, NoCost
	// and relay settings (ProcFlags, else the product's defaults).
	Deployed DeployedConfig
	// Scale is the template of the scale scenario (ScenarioScale): drains
	// and bursts with 1, 2 and 3 relay processes at several aggregate
	// counts; its Relay gets the suite's relay settings with ProcFlags,
	// else the product's defaults.
	Scale ScaleConfig
}

// writersFor returns the writer count of a latency run at rate: at least
// one per 400 events/s (a one-event transaction commits in a few ms with
// fsync), and never fewer than min.
func writersFor(rate float64, min int) int {
	return max(min, int(math.Ceil(rate/400)))
}

func (c *SuiteConfig) setDefaults() {
	if len(c.Scenarios) == 0 {
		c.Scenarios = []string{ScenarioLatency, ScenarioDrain, ScenarioWriters}
	}
	if len(c.Modes) == 0 {
		c.Modes = []string{ModeNotify, ModePoll, ModeNaive, ModeFloor}
	}
	if len(c.PollIntervals) == 0 {
		c.PollIntervals = []time.Duration{500 * time.Millisecond}
	}
	if len(c.Leases) == 0 {
		c.Leases = []time.Duration{30 * time.Second}
	}
	if c.FallbackPoll == 0 {
		c.FallbackPoll = 500 * time.Millisecond
	}
	if len(c.DrainRelays) == 0 {
		c.DrainRelays = []int{1, 2}
	}
	if len(c.Connections) == 0 {
		c.Connections = []int{16, 32, 64}
	}
	if c.Backlog.Events == 0 {
		c.Backlog.Events = 1000000
	}
	if c.LargePayloads.Events == 0 {
		c.LargePayloads.Events = 2000
	}
	if c.LargePayloads.PayloadBytes == 0 {
		c.LargePayloads.PayloadBytes = 900000
	}
	if len(c.NotifyCostRates) == 0 {
		c.NotifyCostRates = DefaultNotifyCostRates
	}
	if c.LatencyRounds == 0 {
		c.LatencyRounds = 1
	}
	if len(c.Rates) == 0 {
		rate := c.Latency.Rate
		if rate == 0 {
			rate = 1000 // LatencyConfig's default
		}
		c.Rates = []float64{rate}
	}
}

// allScenarios is every scenario in the order RunSuite runs them.
var allScenarios = []string{ScenarioBurst, ScenarioLatency, ScenarioDeployed, ScenarioDrain, ScenarioBacklog, ScenarioLargePayloads, ScenarioScale, ScenarioWriters, ScenarioNotifyCost, ScenarioSweep, ScenarioBrokerDown}

// Validate applies defaults and returns an error naming the first invalid
// field.
func (c *SuiteConfig) Validate() error {
	c.setDefaults()
	for _, s := range c.Scenarios {
		if !slices.Contains(allScenarios, s) {
			return fmt.Errorf("bench: SuiteConfig.Scenarios: %q is not latency, deployed, drain, writers, notify-cost, sweep, broker-down, burst, backlog, large-payloads or scale", s)
		}
	}
	if m, after, err := parseWakeup(c.WritersWakeup); err != nil || (m == outbox.WakeupNone && !after) {
		return fmt.Errorf("bench: SuiteConfig.WritersWakeup: %q is not debounced, every-tx or after-commit", c.WritersWakeup)
	}
	for _, r := range c.NotifyCostRates {
		if !(r > 0) || math.IsInf(r, 0) {
			return fmt.Errorf("bench: SuiteConfig.NotifyCostRates: must be positive, got %v", r)
		}
	}
	for _, r := range c.ExtraRates {
		if !(r > 0) || math.IsInf(r, 0) {
			return fmt.Errorf("bench: SuiteConfig.ExtraRates: must be positive, got %v", r)
		}
	}
	for _, r := range c.Rates {
		if !(r > 0) || math.IsInf(r, 0) || r*c.Latency.Duration.Seconds() > 50e6 {
			return fmt.Errorf("bench: SuiteConfig.Rates: must be positive (and at most 50 million events per run), got %v", r)
		}
	}
	if c.LatencyRounds < 1 {
		return fmt.Errorf("bench: SuiteConfig.LatencyRounds: must be positive, got %d", c.LatencyRounds)
	}
	for _, w := range c.LatencyWriters {
		if w != WriterGo && !plainSQL(w) {
			return fmt.Errorf("bench: SuiteConfig.LatencyWriters: %q is not %s, %s or %s", w, WriterGo, WriterPlainSQL, WriterPlainSQLAll)
		}
	}
	if c.MinEvents < 0 {
		return fmt.Errorf("bench: SuiteConfig.MinEvents: must not be negative, got %d", c.MinEvents)
	}
	if slices.Contains(c.Scenarios, ScenarioBurst) {
		bc := c.Burst
		if err := bc.validate(); err != nil {
			return err
		}
	}
	if slices.Contains(c.Scenarios, ScenarioScale) {
		sc := c.Scale
		if err := sc.validate(); err != nil {
			return err
		}
	}
	if slices.Contains(c.Scenarios, ScenarioDeployed) {
		dc := c.Deployed
		if err := dc.validate(); err != nil {
			return err
		}
	}
	if c.Backlog.Events < 0 {
		return fmt.Errorf("bench: SuiteConfig.Backlog.Events: must be positive, got %d", c.Backlog.Events)
	}
	if c.LargePayloads.Events < 0 {
		return fmt.Errorf("bench: SuiteConfig.LargePayloads.Events: must be positive, got %d", c.LargePayloads.Events)
	}
	if b := c.LargePayloads.PayloadBytes; b < 0 || b > outbox.DefaultMaxRecordBytes {
		return fmt.Errorf("bench: SuiteConfig.LargePayloads.PayloadBytes: must be 1..%d, got %d", outbox.DefaultMaxRecordBytes, b)
	}
	for _, m := range c.Modes {
		if !slices.Contains([]string{ModeNotify, ModePoll, ModeNaive, ModeFloor, ModeNotifyProc, ModeNotifyProcB, ModeNotifyEveryTx}, m) {
			return fmt.Errorf("bench: SuiteConfig.Modes: %q is not notify, poll, naive, floor, notify-proc, notify-proc-b or notify-every-tx", m)
		}
	}
	for _, d := range c.PollIntervals {
		if d < time.Millisecond {
			return fmt.Errorf("bench: SuiteConfig.PollIntervals: must be at least 1ms, got %s", d)
		}
	}
	for _, d := range c.Leases {
		if d < time.Second {
			return fmt.Errorf("bench: SuiteConfig.Leases: must be at least 1s, got %s", d)
		}
	}
	for _, n := range c.DrainRelays {
		if n < 1 {
			return fmt.Errorf("bench: SuiteConfig.DrainRelays: must be positive, got %d", n)
		}
	}
	lc := c.Latency
	lc.Mode = ModeFloor // the template's own fields; relay fields are checked per run
	if err := lc.validate(); err != nil {
		return err
	}
	for _, n := range c.Connections {
		if n < 1 {
			return fmt.Errorf("bench: SuiteConfig.Connections: must be positive, got %d", n)
		}
	}
	if slices.Contains(c.Scenarios, ScenarioBrokerDown) {
		bc := c.BrokerDown
		if err := bc.validate(); err != nil {
			return err
		}
	}
	return nil
}

// NeedsRelayBin reports whether cfg runs a relay process of Env.RelayBin
// (mode notify-proc-b runs Env.RelayBinB instead; see NeedsRelayBinB):
// the burst, deployed, backlog, large-payloads and scale scenarios, latency or drain
// with the notify-proc mode, latency with notify-every-tx, or broker-down
// when the bench can take the broker down (brokerControl: kfake or a real
// broker it started; with external brokers broker-down is skipped).
func (c *SuiteConfig) NeedsRelayBin(brokerControl bool) bool {
	has := func(s string) bool { return slices.Contains(c.Scenarios, s) }
	proc := slices.Contains(c.Modes, ModeNotifyProc)
	return has(ScenarioBurst) || has(ScenarioDeployed) || has(ScenarioBacklog) || has(ScenarioLargePayloads) || has(ScenarioScale) || (brokerControl && has(ScenarioBrokerDown)) ||
		(proc && (has(ScenarioLatency) || has(ScenarioDrain))) || (slices.Contains(c.Modes, ModeNotifyEveryTx) && has(ScenarioLatency))
}

// NeedsRelayBinB reports whether cfg runs a relay process of
// Env.RelayBinB: mode notify-proc-b in the latency or drain scenario.
func (c *SuiteConfig) NeedsRelayBinB() bool {
	return slices.Contains(c.Modes, ModeNotifyProcB) && (slices.Contains(c.Scenarios, ScenarioLatency) || slices.Contains(c.Scenarios, ScenarioDrain))
}

// RunSuite runs cfg's scenarios one run after the other and appends each
// Run to rep as it completes (then calls onRun, if not nil), and keeps
// rep.Goals up to date. A failed run is recorded with its Error and the
// suite goes on; RunSuite returns an error only for an invalid cfg or a
// done ctx.
//
// Unless cfg.NoCost, each latency and sweep run with a relay is preceded
// (once per rate, writer count and wake-up mode) by a writers-only
// baseline run at the same load, and its Cost gets the relay's share:
// its per-event figures minus the baseline's.
func (e *Env) RunSuite(ctx context.Context, cfg SuiteConfig, rep *Report, onRun func(Run)) error {
	if err := e.validate(); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	add := func(r Run, err error) {
		if err != nil {
			r.Error = err.Error()
			e.Log.Error("run failed", zap.String("scenario", r.Scenario), zap.String("mode", r.Mode), zap.Error(err))
		}
		rep.Runs = append(rep.Runs, r)
		rep.Goals = EvaluateGoals(rep.Runs)
		rep.AB = CompareAB(rep.Runs)
		rep.Deployed = EvaluateDeployed(rep.Runs)
		if onRun != nil {
			onRun(r)
		}
	}
	relayCfg := func(mode string, poll, lease time.Duration) RelayConfig {
		return RelayConfig{Mode: mode, PollInterval: poll, Lease: lease, BatchSize: cfg.BatchSize, ClaimWindow: cfg.ClaimWindow, ClaimWindowPoll: cfg.ClaimWindowPoll,
			BusyClaimInterval: cfg.BusyClaimInterval, ProcDefaults: procMode(mode) && !cfg.ProcFlags}
	}
	has := func(m string) bool { return slices.Contains(cfg.Modes, m) }
	lease0 := cfg.Leases[0]
	product := ModeNotify
	if has(ModeNotifyProc) {
		product = ModeNotifyProc
	}

	// Writers-only baselines, by load.
	baselines := map[string]*Cost{}
	baselineFor := func(lc LatencyConfig) (*Cost, string, error) {
		if cfg.NoCost || cfg.BaselineDuration < 0 || !lc.hasRelay() {
			return nil, "", nil
		}
		wake := lc.wakeupName()
		key := fmt.Sprintf("%g/s %d writers %d/tx wakeup=%s", lc.Rate, lc.Writers, max(lc.EventsPerTx, 1), wake)
		bl := LatencyConfig{Mode: ModeWritersOnly, Scenario: ScenarioBaseline, WakeupMode: wake, Rate: lc.Rate, Duration: lc.Duration,
			Writers: lc.Writers, EventsPerTx: lc.EventsPerTx, PayloadBytes: lc.PayloadBytes, Aggregates: lc.Aggregates, Warmup: lc.Warmup}
		if plainSQL(lc.Writer) {
			bl.WakeupMode, bl.Writer = "", lc.Writer
		}
		label := fmt.Sprintf("%s %g/s", label(bl), lc.Rate)
		if c, ok := baselines[key]; ok {
			return c, label, nil
		}
		if cfg.BaselineDuration > 0 {
			bl.Duration = cfg.BaselineDuration
		}
		r, err := e.Latency(ctx, bl)
		if r.Scenario == "" {
			r = Run{Scenario: ScenarioBaseline, Mode: ModeWritersOnly}
		}
		add(r, err)
		if err != nil || r.Cost == nil {
			return nil, "", err
		}
		baselines[key] = r.Cost
		return r.Cost, label, nil
	}
	// latency runs one latency or sweep run, after its baseline.
	latency := func(lc LatencyConfig) {
		lc.NoCost = cfg.NoCost
		if cfg.MinEvents > 0 && lc.Rate > 0 {
			lc.Duration = max(lc.Duration, time.Duration(float64(cfg.MinEvents)/lc.Rate*float64(time.Second)))
		}
		if lc.Writers == 0 {
			lc.Writers = 8
		}
		base, baseLabel, baseErr := baselineFor(lc)
		if ctx.Err() != nil {
			return
		}
		r, err := e.Latency(ctx, lc)
		if r.Scenario == "" {
			r = Run{Scenario: lc.Scenario, Mode: lc.Mode}
		}
		if r.Cost != nil {
			if base != nil {
				r.Cost.Attribute(base, baseLabel)
			} else if baseErr != nil {
				r.Note = "no baseline: " + baseErr.Error()
			}
		}
		add(r, err)
	}
	for _, sc := range allScenarios {
		if !slices.Contains(cfg.Scenarios, sc) {
			continue
		}
		switch sc {
		case ScenarioLatency:
			for _, rate := range cfg.Rates {
				for i, m := range roundModes(cfg.Modes, cfg.LatencyRounds) {
					polls := []time.Duration{cfg.FallbackPoll}
					if m == ModePoll || m == ModeNaive {
						polls = cfg.PollIntervals
					}
					for _, p := range polls {
						for _, w := range roundWriters(cfg.LatencyWriters, m, i) {
							if ctx.Err() != nil {
								return ctx.Err()
							}
							lc := cfg.Latency
							lc.Mode, lc.Scenario, lc.Relay, lc.Writer = m, ScenarioLatency, relayCfg(m, p, lease0), w
							lc.Rate, lc.Writers = rate, writersFor(rate, cmp.Or(cfg.Latency.Writers, 8))
							latency(lc)
						}
					}
				}
			}
			extra := []string{product}
			if product == ModeNotifyProc && has(ModeNotifyProcB) {
				extra = append(extra, ModeNotifyProcB) // its A/B twin
			}
			for _, rate := range cfg.ExtraRates {
				for _, m := range extra {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					lc := cfg.Latency
					lc.Mode, lc.Scenario, lc.Relay = m, ScenarioLatency, relayCfg(m, cfg.FallbackPoll, lease0)
					lc.Rate = rate
					lc.Writers = writersFor(rate, cfg.Latency.Writers)
					latency(lc)
				}
			}
		case ScenarioDeployed:
			dc := cfg.Deployed
			lt := cfg.Latency
			dc.Latency = LatencyConfig{Duration: lt.Duration, Grace: lt.Grace, PayloadBytes: lt.PayloadBytes,
				FloorProbeRate: lt.FloorProbeRate, Warmup: lt.Warmup, Writers: lt.Writers}
			if dc.Rounds == 0 {
				dc.Rounds = cfg.LatencyRounds
			}
			if dc.BaselineDuration == 0 {
				dc.BaselineDuration = cfg.BaselineDuration
			}
			dc.NoCost = cfg.NoCost
			dc.Relay = relayCfg(ModeNotifyProc, cfg.FallbackPoll, lease0)
			if err := e.Deployed(ctx, dc, add); err != nil {
				return err
			}
		case ScenarioDrain:
			// poll drains exactly like notify (a full claim is followed by
			// another at once), so it is not run separately.
			var modes []string
			for _, m := range []string{ModeNotify, ModeNotifyProc, ModeNotifyProcB, ModeNaive} {
				if has(m) {
					modes = append(modes, m)
				}
			}
			modes = append(modes, ModeSQLCeiling)
			for _, m := range modes {
				relays := cfg.DrainRelays
				if m != ModeNotify {
					relays = relays[:1]
				}
				for _, n := range relays {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					dc := cfg.Drain
					dc.Mode, dc.Relays, dc.NoCost = m, n, cfg.NoCost
					dc.Relay = relayCfg(m, cfg.FallbackPoll, lease0)
					dc.Relay.ProcDefaults = false // as the in-process drains
					if m == ModeNaive {
						dc.Relay.PollInterval = cfg.PollIntervals[0]
					}
					r, err := e.Drain(ctx, dc)
					if r.Scenario == "" {
						r = Run{Scenario: ScenarioDrain, Mode: m, Drain: &Drain{Relays: n}}
					}
					add(r, err)
				}
			}
		case ScenarioBacklog:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			dc := cfg.Backlog
			dc.Scenario, dc.Mode, dc.Relays, dc.SQLPreload, dc.NoCost = ScenarioBacklog, ModeNotifyProc, 1, true, cfg.NoCost
			dc.PayloadBytes, dc.Aggregates = cfg.Drain.PayloadBytes, cfg.Drain.Aggregates
			dc.Relay = relayCfg(ModeNotifyProc, cfg.FallbackPoll, lease0)
			r, err := e.Drain(ctx, dc)
			if r.Scenario == "" {
				r = Run{Scenario: ScenarioBacklog, Mode: ModeNotifyProc, Drain: &Drain{Relays: 1, Events: int64(dc.Events)}}
			}
			add(r, err)
		case ScenarioLargePayloads:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			dc := cfg.LargePayloads
			dc.Scenario, dc.Mode, dc.Relays, dc.SQLPreload, dc.NoCost = ScenarioLargePayloads, ModeNotifyProc, 1, true, cfg.NoCost
			if dc.PreloadBatch == 0 {
				dc.PreloadBatch = 100
			}
			if dc.Aggregates == 0 {
				dc.Aggregates = 50
			}
			// The relay's own defaults, whatever ProcFlags says: the
			// figure is the bound its default byte bound gives.
			dc.Relay = RelayConfig{Mode: ModeNotifyProc, ProcDefaults: true}
			r, err := e.Drain(ctx, dc)
			if r.Scenario == "" {
				r = Run{Scenario: ScenarioLargePayloads, Mode: ModeNotifyProc, Drain: &Drain{Relays: 1, Events: int64(dc.Events)}}
			}
			add(r, err)
		case ScenarioScale:
			sc := cfg.Scale
			sc.Relay = relayCfg(ModeNotifyProc, cfg.FallbackPoll, lease0)
			if sc.PayloadBytes == 0 {
				sc.PayloadBytes = cfg.Drain.PayloadBytes
			}
			runs, err := e.Scale(ctx, sc)
			for _, r := range runs {
				add(r, nil)
			}
			if err != nil {
				return err
			}
		case ScenarioBurst:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			bc := cfg.Burst
			bc.Relay = relayCfg(ModeNotifyProc, cfg.FallbackPoll, lease0)
			if bc.PayloadBytes == 0 {
				bc.PayloadBytes = cfg.Latency.PayloadBytes
			}
			if bc.Aggregates == 0 {
				bc.Aggregates = cfg.Latency.Aggregates
			}
			r, err := e.Burst(ctx, bc)
			if r.Scenario == "" {
				r = Run{Scenario: ScenarioBurst, Mode: ModeNotifyProc}
			}
			add(r, err)
		case ScenarioWriters:
			// Each configuration runs four times, in A-B-B-A-B-A-A-B order
			// (A: no wake-ups, B: wake-ups), a quarter of the duration
			// each, and the rounds of a mode are added up: drift on the
			// machine during the scenario (autovacuum, checkpoints, a
			// warming cache, a busy neighbour on a shared host) then weighs
			// on both modes alike instead of on the one that happens to run
			// second. On the 2-core development VM two identical
			// configurations measured as one A-B-B-A pair of 4s rounds
			// differed by up to 6%; a round costs about 0.25s of set-up.
			for _, c := range cfg.Connections {
				rounds := map[bool][]Run{}
				var failed error
				for _, wake := range []bool{false, true, true, false, true, false, false, true} {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					wc := cfg.Writers
					wc.Connections, wc.Wakeups = c, wake
					if wake {
						wc.WakeupMode = cfg.WritersWakeup
					}
					wc.Duration = max(wc.Duration/4, time.Second)
					wc.Relay = RelayConfig{PollInterval: cfg.FallbackPoll, Lease: lease0, BatchSize: cfg.BatchSize, ClaimWindow: cfg.ClaimWindow, ClaimWindowPoll: cfg.ClaimWindowPoll,
						BusyClaimInterval: cfg.BusyClaimInterval}
					r, err := e.Writers(ctx, wc)
					if err != nil && failed == nil {
						failed = err
					}
					rounds[wake] = append(rounds[wake], r)
				}
				none := mergeWriterRounds(rounds[false], c, false)
				with := mergeWriterRounds(rounds[true], c, true)
				if failed == nil && none.CommitsPerS > 0 {
					with.Ratio = with.CommitsPerS / none.CommitsPerS
				}
				add(none, failed)
				add(with, failed)
			}
		case ScenarioNotifyCost:
			for _, rate := range cfg.NotifyCostRates {
				for _, m := range wakeupNames {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					lc := cfg.Latency
					lc.Mode, lc.Scenario, lc.Rate = ModeWritersOnly, ScenarioNotifyCost, rate
					lc.WakeupMode, lc.Listen, lc.NoCost = m, true, cfg.NoCost
					lc.Writers = writersFor(rate, cfg.Latency.Writers)
					if cfg.MinEvents > 0 {
						lc.Duration = max(lc.Duration, time.Duration(float64(cfg.MinEvents)/rate*float64(time.Second)))
					}
					r, err := e.Latency(ctx, lc)
					if r.Scenario == "" {
						r = Run{Scenario: ScenarioNotifyCost, Mode: ModeWritersOnly}
					}
					add(r, err)
				}
			}
		case ScenarioSweep:
			for _, m := range []string{ModeNotify, ModePoll} {
				if !has(m) {
					continue
				}
				for _, p := range cfg.PollIntervals {
					for _, l := range cfg.Leases {
						if ctx.Err() != nil {
							return ctx.Err()
						}
						lc := cfg.Latency
						lc.Mode, lc.Scenario, lc.Relay = m, ScenarioSweep, relayCfg(m, p, l)
						if cfg.SweepDuration > 0 {
							lc.Duration = cfg.SweepDuration
						}
						latency(lc)
					}
				}
			}
		case ScenarioBrokerDown:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			bc := cfg.BrokerDown
			bc.Relay = relayCfg(ModeNotify, cfg.FallbackPoll, lease0)
			r, err := e.BrokerDown(ctx, bc)
			if r.Scenario == "" {
				r = Run{Scenario: ScenarioBrokerDown, Mode: ModeNotify, BrokerDown: &BrokerDown{OutageS: bc.Outage.Seconds(), Rate: bc.Rate}}
			}
			if errors.Is(err, ErrNoBrokerControl) {
				r.Note, err = "skipped: the broker is external (--brokers); only a broker the bench started can be taken down", nil
				e.Log.Warn("broker-down skipped: external brokers")
			}
			add(r, err)
		}
	}
	return ctx.Err()
}

// roundModes returns the latency scenario's modes at one rate over
// rounds rounds: modes in order, then reversed, and so on (A B, B A, ...).
// roundWriters returns the writer kinds of a latency scenario's i-th run
// of mode m: writers in turn, reversed every other run, so that neither
// kind always runs first; [""] (outbox.Writer) when none are given, and
// for the modes that take outbox.Writer's writers only (the broker's
// floor, every-tx, writers-only), which run once.
func roundWriters(writers []string, m string, i int) []string {
	if len(writers) == 0 || m == ModeFloor || m == ModeNotifyEveryTx || m == ModeWritersOnly {
		return []string{""}
	}
	out := slices.Clone(writers)
	if i%2 == 1 {
		slices.Reverse(out)
	}
	return out
}

func roundModes(modes []string, rounds int) []string {
	var out []string
	for r := range rounds {
		for i := range modes {
			if r%2 == 1 {
				i = len(modes) - 1 - i
			}
			out = append(out, modes[i])
		}
	}
	return out
}

// mergeWriterRounds adds up the rounds of one writers configuration:
// commits and time are summed, commits/s recomputed; the transaction
// latency percentiles are the worse of the rounds'.
func mergeWriterRounds(rounds []Run, connections int, wakeups bool) Run {
	out := Run{Scenario: ScenarioWriters, Writers: &Writers{Connections: connections, Wakeups: wakeups}}
	for _, r := range rounds {
		if r.Writers == nil {
			continue
		}
		if out.Mode == "" {
			out.Mode = r.Mode
			out.Writers.WakeupMode = r.Writers.WakeupMode
		}
		out.DurationS += r.DurationS
		out.Commits += r.Commits
		out.FailedCommits += r.FailedCommits
		out.TxP50MS = max(out.TxP50MS, r.TxP50MS)
		out.TxP99MS = max(out.TxP99MS, r.TxP99MS)
		out.Writers.relay = out.Writers.relay.add(r.Writers.relay)
	}
	if out.DurationS > 0 {
		out.CommitsPerS = float64(out.Commits) / out.DurationS
	}
	out.Writers.setRelayRates(out.DurationS)
	return out
}
