package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"
)

// SuiteConfig selects what RunSuite runs.
type SuiteConfig struct {
	// Scenarios to run, in this order of preference: latency, drain,
	// writers, sweep, broker-down. Defaults to latency, drain, writers.
	Scenarios []string
	// Modes for the latency scenario (notify, poll, naive, floor); drain
	// uses notify (with each of DrainRelays), notify-proc and naive (one
	// relay) among them, plus sql-ceiling; sweep uses notify and poll.
	// notify-proc (drain only) runs the relay as a child process
	// (Env.RelayBin) to measure its own RSS. Defaults to notify, poll,
	// naive and floor.
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
	// Linger is the product relay's relay.Config.Linger: 0 keeps its
	// default (relay.DefaultLinger), negative disables it.
	Linger time.Duration
	// Latency is the template of every latency run (Mode and Relay are set
	// per run).
	Latency LatencyConfig
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
	// BrokerDown is the template of the broker-down run (its Relay is
	// set from FallbackPoll, the first lease, BatchSize and Linger).
	BrokerDown BrokerDownConfig
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
}

// Validate applies defaults and returns an error naming the first invalid
// field.
func (c *SuiteConfig) Validate() error {
	c.setDefaults()
	for _, s := range c.Scenarios {
		if !slices.Contains([]string{ScenarioLatency, ScenarioDrain, ScenarioWriters, ScenarioSweep, ScenarioBrokerDown}, s) {
			return fmt.Errorf("bench: SuiteConfig.Scenarios: %q is not latency, drain, writers, sweep or broker-down", s)
		}
	}
	for _, m := range c.Modes {
		if !slices.Contains([]string{ModeNotify, ModePoll, ModeNaive, ModeFloor, ModeNotifyProc}, m) {
			return fmt.Errorf("bench: SuiteConfig.Modes: %q is not notify, poll, naive, floor or notify-proc", m)
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

// NeedsRelayBin reports whether cfg runs a relay process (Env.RelayBin):
// the broker-down scenario, or drain with the notify-proc mode.
func (c *SuiteConfig) NeedsRelayBin() bool {
	return slices.Contains(c.Scenarios, ScenarioBrokerDown) ||
		(slices.Contains(c.Scenarios, ScenarioDrain) && slices.Contains(c.Modes, ModeNotifyProc))
}

// RunSuite runs cfg's scenarios one run after the other and appends each
// Run to rep as it completes (then calls onRun, if not nil). A failed run is
// recorded with its Error and the suite goes on; RunSuite returns an error
// only for an invalid cfg or a done ctx.
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
		if onRun != nil {
			onRun(r)
		}
	}
	relayCfg := func(mode string, poll, lease time.Duration) RelayConfig {
		return RelayConfig{Mode: mode, PollInterval: poll, Lease: lease, BatchSize: cfg.BatchSize, Linger: cfg.Linger}
	}
	has := func(m string) bool { return slices.Contains(cfg.Modes, m) }
	lease0 := cfg.Leases[0]
	for _, sc := range []string{ScenarioLatency, ScenarioDrain, ScenarioWriters, ScenarioSweep, ScenarioBrokerDown} {
		if !slices.Contains(cfg.Scenarios, sc) {
			continue
		}
		switch sc {
		case ScenarioLatency:
			for _, m := range cfg.Modes {
				if m == ModeNotifyProc {
					continue // drain only
				}
				polls := []time.Duration{cfg.FallbackPoll}
				if m == ModePoll || m == ModeNaive {
					polls = cfg.PollIntervals
				}
				for _, p := range polls {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					lc := cfg.Latency
					lc.Mode, lc.Scenario, lc.Relay = m, ScenarioLatency, relayCfg(m, p, lease0)
					r, err := e.Latency(ctx, lc)
					if r.Scenario == "" {
						r = Run{Scenario: ScenarioLatency, Mode: m}
					}
					add(r, err)
				}
			}
		case ScenarioDrain:
			// poll drains exactly like notify (a full claim is followed by
			// another at once), so it is not run separately.
			var modes []string
			for _, m := range []string{ModeNotify, ModeNotifyProc, ModeNaive} {
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
					dc.Mode, dc.Relays = m, n
					dc.Relay = relayCfg(m, cfg.FallbackPoll, lease0)
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
					wc.Duration = max(wc.Duration/4, time.Second)
					wc.Relay = RelayConfig{PollInterval: cfg.FallbackPoll, Lease: lease0, BatchSize: cfg.BatchSize, Linger: cfg.Linger}
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
						r, err := e.Latency(ctx, lc)
						if r.Scenario == "" {
							r = Run{Scenario: ScenarioSweep, Mode: m}
						}
						add(r, err)
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
				r.Note, err = "skipped: the broker is external (--brokers); only the in-process broker can be taken down", nil
				e.Log.Warn("broker-down skipped: external brokers")
			}
			add(r, err)
		}
	}
	return ctx.Err()
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
