package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox"
)

// Scenario names of the deployed scenario (issue 29: the shape users
// deploy, several relays, against one relay).
const (
	// ScenarioDeployed selects the deployed scenario in
	// SuiteConfig.Scenarios, and names its latency runs: plain-SQL
	// writers (WriterPlainSQL) at each DeployedConfig.Rates with 1 and
	// DeployedConfig.Relays relay processes, interleaved in rounds.
	ScenarioDeployed = "deployed"
	// ScenarioDeployedIdle names its idle runs: 1 and Relays relay
	// processes with no traffic, the database's CPU per second.
	ScenarioDeployedIdle = "deployed-idle"
	// ScenarioDeployedRestart names its rolling-restart run: Relays relay
	// processes at RestartRate, restarted one by one.
	ScenarioDeployedRestart = "deployed-restart"
)

// DeployedConfig configures the deployed scenario.
type DeployedConfig struct {
	// Rates are the latency runs' arrival rates, events/s. Defaults to
	// 500, 1000.
	Rates []float64
	// Relays is the relay count compared with one. Defaults to 3.
	Relays int
	// Rounds is how many times each relay count runs at each rate (and
	// idle), interleaved: 1 then Relays in the first round, the other way
	// round in the second, and so on. Defaults to 1.
	Rounds int
	// Latency is the template of the latency runs (Duration, Grace,
	// PayloadBytes, FloorProbeRate, Warmup; Writers: at least one per 400
	// events/s). Its Mode, Relay, Relays, Writer, Rate and Aggregates are
	// set by the scenario.
	Latency LatencyConfig
	// Writer is the writers' kind: WriterPlainSQL (the default: the
	// README's example, naming each event's key partition) or
	// WriterPlainSQLAll (an empty payload, which wakes every relay).
	Writer string
	// Aggregates is the number of aggregate IDs. Defaults to 200 (issue
	// 29's setup).
	Aggregates int
	// BaselineDuration is how long the writers-only baseline at each rate
	// writes. Defaults to Latency.Duration; negative: none (no relay share
	// of the database CPU, so no CPU ratios).
	BaselineDuration time.Duration
	// Relay configures the relay processes (Mode notify-proc; RelayID is
	// set to "bench-relay": each gets --relay-id bench-relay-<i>).
	Relay RelayConfig
	// IdleWindow is how long each idle run measures, after IdleSettle.
	// Defaults to 10s; negative: no idle runs.
	IdleWindow time.Duration
	// IdleSettle is how long an idle run waits after its warm-up before
	// measuring (past the relays' linger). Defaults to 2s.
	IdleSettle time.Duration
	// RestartRate is the rolling-restart run's rate, events/s. Defaults
	// to 500; negative: no rolling-restart run.
	RestartRate float64
	// RestartInterval is the time between two restarts. Defaults to 8s;
	// the run lasts (Relays + 1) x RestartInterval.
	RestartInterval time.Duration
	// NoCost turns the cost measurement off (and with it the CPU ratios).
	NoCost bool
}

func (c *DeployedConfig) validate() error {
	if len(c.Rates) == 0 {
		c.Rates = []float64{500, 1000}
	}
	if c.Relays == 0 {
		c.Relays = 3
	}
	if c.Rounds == 0 {
		c.Rounds = 1
	}
	if c.Aggregates == 0 {
		c.Aggregates = 200
	}
	if c.Writer == "" {
		c.Writer = WriterPlainSQL
	}
	if !plainSQL(c.Writer) {
		return fmt.Errorf("bench: DeployedConfig.Writer: %q is not %s or %s", c.Writer, WriterPlainSQL, WriterPlainSQLAll)
	}
	if c.IdleWindow == 0 {
		c.IdleWindow = 10 * time.Second
	}
	if c.IdleSettle == 0 {
		c.IdleSettle = 2 * time.Second
	}
	if c.RestartRate == 0 {
		c.RestartRate = 500
	}
	if c.RestartInterval == 0 {
		c.RestartInterval = 8 * time.Second
	}
	for _, r := range c.Rates {
		if !(r > 0) || math.IsInf(r, 0) {
			return fmt.Errorf("bench: DeployedConfig.Rates: must be positive, got %v", r)
		}
	}
	switch {
	case c.Relays < 2 || c.Relays > 16:
		return fmt.Errorf("bench: DeployedConfig.Relays: must be 2..16, got %d", c.Relays)
	case c.Rounds < 1:
		return fmt.Errorf("bench: DeployedConfig.Rounds: must be positive, got %d", c.Rounds)
	case c.Aggregates < 1:
		return fmt.Errorf("bench: DeployedConfig.Aggregates: must be positive, got %d", c.Aggregates)
	case c.IdleSettle < 0:
		return fmt.Errorf("bench: DeployedConfig.IdleSettle: must not be negative, got %s", c.IdleSettle)
	case c.RestartInterval < 0 || math.IsNaN(c.RestartRate) || math.IsInf(c.RestartRate, 0):
		return fmt.Errorf("bench: DeployedConfig: restart rate %v, interval %s", c.RestartRate, c.RestartInterval)
	}
	c.Relay.Mode = ModeNotifyProc
	if c.Relay.RelayID == "" {
		c.Relay.RelayID = "bench-relay"
	}
	return c.Relay.validate()
}

// Restart is one relay restart of a rolling-restart run.
type Restart struct {
	// Relay is the relay's index; RelayID its --relay-id (old and new
	// process).
	Relay   int    `json:"relay"`
	RelayID string `json:"relay_id,omitempty"`
	// AtS is when SIGTERM was sent, seconds after the send phase began.
	AtS float64 `json:"at_s"`
	// StopS is SIGTERM to the old process's exit; StartS the replacement's
	// start to its readiness (metrics up, listening), in seconds.
	StopS  float64 `json:"stop_s"`
	StartS float64 `json:"start_s"`
}

// rollingRestart restarts g's relay processes one by one, cfg.RollingRestart
// apart from start on: SIGTERM, wait for the exit, start a replacement with
// the same --relay-id, wait until it is ready, and put it in g's place (so
// the caller's deferred Stop stops it).
func (e *Env) rollingRestart(ctx context.Context, g relayGroup, start time.Time, cfg LatencyConfig, db *runDB, topic, channel string, log *zap.Logger) ([]Restart, error) {
	var out []Restart
	for i := range g {
		at := start.Add(time.Duration(i+1) * cfg.RollingRestart)
		if err := waitCtx(ctx, time.Until(at)); err != nil {
			return out, err
		}
		old, ok := g[i].(*relayProc)
		if !ok {
			return out, fmt.Errorf("bench: rolling restart: relay %d is not a process", i)
		}
		rc := cfg.Relay
		rc.RelayID = cfg.Relay.memberID(i)
		r := Restart{Relay: i, RelayID: rc.RelayID, AtS: time.Since(start).Seconds()}
		t0 := time.Now()
		old.Stop()
		r.StopS = time.Since(t0).Seconds()
		t1 := time.Now()
		p, err := e.startRelayProc(db, topic, channel, rc, log.Named(fmt.Sprintf("restart%d", i)))
		if err != nil {
			return out, err
		}
		g[i] = p
		if err := p.waitReady(ctx, time.Minute); err != nil {
			return out, err
		}
		r.StartS = time.Since(t1).Seconds()
		log.Info("relay restarted", zap.Int("relay", i), zap.Float64("stop_s", r.StopS), zap.Float64("start_s", r.StartS))
		out = append(out, r)
	}
	return out, nil
}

// orderViolations counts, for events 0..len(commitAt)-1 whose aggregate
// is j%aggs, the pairs of consecutive received events of one aggregate
// (a, then b) where b's transaction began after a's COMMIT returned but b
// was received on another partition than a, or at a lower offset. Events
// not committed or not received (off < 0) are skipped.
func orderViolations(aggs int, began, commitAt []time.Time, part []int32, off []int64) int64 {
	var v int64
	for a := range aggs {
		prev := -1
		for j := a; j < len(commitAt); j += aggs {
			if commitAt[j].IsZero() || off[j] < 0 {
				continue
			}
			if prev >= 0 && began[j].After(commitAt[prev]) && (part[j] != part[prev] || off[j] < off[prev]) {
				v++
			}
			prev = j
		}
	}
	return v
}

// Deployed runs the deployed scenario and hands every run to add as it
// completes: at each rate a writers-only baseline (plain-SQL writers), then
// 1 and cfg.Relays relay processes (notify-proc with their defaults, each
// its own --relay-id) in cfg.Rounds interleaved rounds, and after the runs
// at cfg.RestartRate the rolling-restart run (at the end if that rate is
// not among cfg.Rates); then the idle runs (1 and cfg.Relays,
// interleaved). It returns ctx's
// error only; a failed run is handed to add with its error.
func (e *Env) Deployed(ctx context.Context, cfg DeployedConfig, add func(Run, error)) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	counts := []int{1, cfg.Relays}
	latency := func(rate float64, n, round int, base *Cost, baseLabel string) {
		lc := cfg.Latency
		lc.Mode, lc.Scenario, lc.Relay, lc.Relays = ModeNotifyProc, ScenarioDeployed, cfg.Relay, n
		lc.Writer, lc.Rate, lc.Aggregates, lc.CheckOrder, lc.Round = cfg.Writer, rate, cfg.Aggregates, true, round
		lc.Writers = writersFor(rate, max(lc.Writers, 8))
		lc.NoCost, lc.IdleWindow = cfg.NoCost, 0
		r, err := e.Latency(ctx, lc)
		if r.Scenario == "" {
			r = Run{Scenario: ScenarioDeployed, Mode: ModeNotifyProc, Latency: &Latency{Rate: rate, LatencyRelays: n, Round: round}}
		}
		r.LatencyRelays = n // 1 too: the table pairs runs by it
		if r.Cost != nil && base != nil {
			r.Cost.Attribute(base, baseLabel)
		}
		add(r, err)
	}
	// restart is the rolling-restart run; it runs right after the runs at
	// its rate (if among Rates), so that the one-relay p99 it is judged
	// against was measured minutes, not a whole scenario, before.
	restart := func() {
		if ctx.Err() != nil {
			return
		}
		lc := cfg.Latency
		lc.Mode, lc.Scenario, lc.Relay, lc.Relays = ModeNotifyProc, ScenarioDeployedRestart, cfg.Relay, cfg.Relays
		lc.Writer, lc.Rate, lc.Aggregates, lc.CheckOrder = cfg.Writer, cfg.RestartRate, cfg.Aggregates, true
		lc.Writers = writersFor(cfg.RestartRate, max(lc.Writers, 8))
		lc.RollingRestart = cfg.RestartInterval
		lc.Duration = time.Duration(cfg.Relays+1) * cfg.RestartInterval
		lc.NoCost, lc.IdleWindow = true, 0 // replaced processes' CPU time is not tracked
		r, err := e.Latency(ctx, lc)
		if r.Scenario == "" {
			r = Run{Scenario: ScenarioDeployedRestart, Mode: ModeNotifyProc, Latency: &Latency{Rate: cfg.RestartRate}}
		}
		r.LatencyRelays = cfg.Relays
		add(r, err)
	}
	for _, rate := range cfg.Rates {
		var base *Cost
		var baseLabel string
		if !cfg.NoCost && cfg.BaselineDuration >= 0 {
			bl := LatencyConfig{Mode: ModeWritersOnly, Scenario: ScenarioBaseline, Writer: cfg.Writer, Rate: rate,
				Duration: cmp.Or(cfg.BaselineDuration, cfg.Latency.Duration), Writers: writersFor(rate, max(cfg.Latency.Writers, 8)),
				PayloadBytes: cfg.Latency.PayloadBytes, Aggregates: cfg.Aggregates, Warmup: cfg.Latency.Warmup}
			r, err := e.Latency(ctx, bl)
			if r.Scenario == "" {
				r = Run{Scenario: ScenarioBaseline, Mode: ModeWritersOnly}
			}
			add(r, err)
			if err == nil && r.Cost != nil {
				base, baseLabel = r.Cost, fmt.Sprintf("%s %g/s", label(bl), rate)
			}
		}
		for round := range cfg.Rounds {
			for _, n := range roundOrder(counts, round) {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				latency(rate, n, round+1, base, baseLabel)
			}
		}
		if cfg.RestartRate == rate {
			restart()
		}
	}
	if cfg.IdleWindow > 0 {
		for round := range cfg.Rounds {
			for _, n := range roundOrder(counts, round) {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				r, err := e.deployedIdle(ctx, cfg, n, round+1)
				add(r, err)
			}
		}
	}
	if cfg.RestartRate > 0 && !slices.Contains(cfg.Rates, cfg.RestartRate) {
		restart()
	}
	return ctx.Err()
}

// roundOrder is counts in order in even rounds (0, 2, ...) and reversed in
// odd ones.
func roundOrder(counts []int, round int) []int {
	out := slices.Clone(counts)
	if round%2 == 1 {
		slices.Reverse(out)
	}
	return out
}

// deployedIdle is one idle run: n relay processes on a fresh table, ten
// warm-up events through the whole path, cfg.IdleSettle, then
// cfg.IdleWindow with no traffic: the database's CPU (Cost.DBCPUS over
// Cost.CostWindowS), the relays' CPU, transactions and claims.
func (e *Env) deployedIdle(ctx context.Context, cfg DeployedConfig, n, round int) (Run, error) {
	log := e.Log.Named(ScenarioDeployedIdle)
	run := Run{Scenario: ScenarioDeployedIdle, Mode: ModeNotifyProc, Latency: &Latency{LatencyRelays: n, Round: round, RelayDefaults: cfg.Relay.ProcDefaults, WriterKind: cfg.Writer}}
	db, err := e.freshDB(ctx, 2)
	if err != nil {
		return run, err
	}
	defer db.Close()
	topic, err := e.freshTopic(ctx, "idle")
	if err != nil {
		return run, err
	}
	defer e.dropTopic(topic)
	const warm = 10
	ids := make([]uuid.UUID, warm)
	for i := range ids {
		ids[i] = outbox.NewID()
	}
	tr, err := startTracker(ctx, e.Brokers, topic, ids, log)
	if err != nil {
		return run, err
	}
	defer tr.Stop()
	probe, err := e.openCostProbe(ctx)
	if err != nil {
		return run, err
	}
	defer probe.Close()
	rel, err := e.startRelays(ctx, db, topic, db.Schema, cfg.Relay, n, log)
	if err != nil {
		return run, err
	}
	defer rel.Stop()
	body := payload(cmp.Or(cfg.Latency.PayloadBytes, 100))
	event := func(j int) outbox.Event {
		return outbox.Event{ID: ids[j], AggregateID: fmt.Sprintf("agg-%d", j%cfg.Aggregates), Type: "bench.event", Payload: body}
	}
	if err := warmUp(ctx, &sqlSender{db: db, channel: db.Schema, all: cfg.Writer == WriterPlainSQLAll}, tr, event, 0, warm, time.Minute); err != nil {
		if perr := relayExited(rel); perr != nil {
			return run, perr
		}
		return run, err
	}
	db.Pool.Close() // the writers' connections are gone, as the writers are
	e.Progress.Begin(fmt.Sprintf("%s x%d", ScenarioDeployedIdle, n), func() string { return "" })
	defer e.Progress.End()
	if err := waitCtx(ctx, cfg.IdleSettle); err != nil {
		return run, err
	}
	c0, err := probe.Sample(ctx, 0)
	if err != nil {
		return run, err
	}
	c0.relaySec = relayCPU(rel)
	s0 := rel.Stats()
	if err := waitCtx(ctx, cfg.IdleWindow); err != nil {
		return run, err
	}
	if err := relayExited(rel); err != nil {
		return run, err
	}
	c1, err := probe.Sample(ctx, 0)
	if err != nil {
		return run, err
	}
	c1.relaySec = relayCPU(rel)
	idle := rel.Stats().sub(s0)
	d := probe.delta(c0, c1, 0)
	run.Cost = d.cost(0)
	run.DurationS = d.seconds
	run.IdleWindowS = d.seconds
	if d.seconds > 0 {
		run.IdleClaimsPerS = float64(idle.Claims) / d.seconds
	}
	return run, nil
}

// DeployedCheck is one verdict of the deployed scenario: a figure of
// Relays relays against one relay's (or of the rolling restart), with its
// goal (issue 29, goals 1 and 2).
type DeployedCheck struct {
	// Name says what is compared, e.g. "DB CPU per event, 3 / 1 relays".
	Name string `json:"name"`
	// Rate is the runs' rate, events/s; 0 for idle.
	Rate float64 `json:"rate"`
	// One and Many are the medians over the rounds of the figure with one
	// relay and with Relays relays (rolling restart: One is the bound's
	// base, one relay's p99 at the rate, Many the restart run's figure).
	One  float64 `json:"one"`
	Many float64 `json:"many"`
	// Value is what the goal judges: Many / One, Many - One or Many
	// (Kind).
	Value float64 `json:"value"`
	// Kind is "ratio", "difference" or "value".
	Kind string `json:"kind"`
	// Target is the bound (Value <= Target); Unit is Value's unit.
	Target float64 `json:"target"`
	Unit   string  `json:"unit"`
	// Pass is whether Value <= Target; null when not measured.
	Pass *bool `json:"pass"`
	// RoundMin and RoundMax are the lowest and highest of the per-round
	// values (the pair of one round: Many_r / One_r or Many_r - One_r):
	// the spread; Rounds how many rounds had both runs.
	RoundMin float64 `json:"round_min"`
	RoundMax float64 `json:"round_max"`
	Rounds   int     `json:"rounds"`
	// Note says why a check is n/a.
	Note string `json:"note,omitempty"`
}

// deployedFigure is a figure of a deployed run: ok false when not
// measured.
type deployedFigure struct {
	name string
	// kind: "ratio" or "difference".
	kind   string
	target float64
	unit   string
	get    func(r *Run) (float64, bool)
}

// totalCPUPerEvent is the relays' database CPU per event (the baseline
// subtracted) plus their processes' CPU per event, in ms.
func totalCPUPerEvent(r *Run) (float64, bool) {
	if r.Cost == nil || r.RelayDBCPUMSPerEvent == nil || r.RelayCPUMSPerEvent == nil {
		return 0, false
	}
	return *r.RelayDBCPUMSPerEvent + *r.RelayCPUMSPerEvent, true
}

// idleDBCPUPerS is an idle run's database CPU seconds per second.
func idleDBCPUPerS(r *Run) (float64, bool) {
	if r.Cost == nil || r.DBCPUS == nil || r.CostWindowS <= 0 {
		return 0, false
	}
	return *r.DBCPUS / r.CostWindowS, true
}

// deployedFigures are goal 1's comparisons at each rate.
var deployedFigures = []deployedFigure{
	{"relays' DB CPU per event", "ratio", 1.15, "ratio", costOf(func(c *Cost) *float64 { return c.RelayDBCPUMSPerEvent })},
	{"total CPU per event (relays' DB + processes)", "ratio", 1.25, "ratio", totalCPUPerEvent},
	{"p50 latency", "difference", 1, "ms", func(r *Run) (float64, bool) { return r.P50MS, r.Count > 0 }},
	{"p99 latency", "ratio", 2, "ratio", func(r *Run) (float64, bool) { return r.P99MS, r.Count > 0 }},
}

// Deployed goals' bounds (issue 29).
const (
	deployedIdleRatio     = 1.5
	deployedRestartP99    = 2   // x one relay's p99 at the rate
	deployedRestartMaxMS  = 250 // ms
	deployedRestartFactor = "x 1 relay's p99"
)

// EvaluateDeployed computes the deployed scenario's verdicts from runs:
// at each rate (in the order they ran) the figures of deployedFigures for
// the most relays against one relay, from the medians over the rounds,
// with the per-round spread; idle database CPU per second; and the
// rolling restart's p99 (against twice one relay's median p99 at its
// rate), max, lost events and order violations. nil without deployed
// runs.
func EvaluateDeployed(runs []Run) []DeployedCheck {
	type key struct {
		rate float64
		n    int
	}
	byKey := map[key][]*Run{}
	var rates []float64
	many := 0
	var idle, restart []*Run
	for i := range runs {
		r := &runs[i]
		if r.Latency == nil || r.Error != "" {
			continue
		}
		switch r.Scenario {
		case ScenarioDeployed:
			if !slices.Contains(rates, r.Rate) {
				rates = append(rates, r.Rate)
			}
			n := max(r.LatencyRelays, 1)
			byKey[key{r.Rate, n}] = append(byKey[key{r.Rate, n}], r)
			many = max(many, n)
		case ScenarioDeployedIdle:
			idle = append(idle, r)
			many = max(many, r.LatencyRelays)
		case ScenarioDeployedRestart:
			restart = append(restart, r)
		}
	}
	if len(rates) == 0 && len(idle) == 0 && len(restart) == 0 {
		return nil
	}
	var out []DeployedCheck
	for _, rate := range rates {
		for _, f := range deployedFigures {
			out = append(out, compareRelays(fmt.Sprintf("%s, %d / 1 relays", f.name, many), rate, f.kind, f.target, f.unit,
				byKey[key{rate, 1}], byKey[key{rate, many}], f.get))
		}
	}
	if len(idle) > 0 {
		var one, m []*Run
		for _, r := range idle {
			switch max(r.LatencyRelays, 1) {
			case 1:
				one = append(one, r)
			case many:
				m = append(m, r)
			}
		}
		out = append(out, compareRelays(fmt.Sprintf("idle DB CPU per second, %d / 1 relays", many), 0, "ratio", deployedIdleRatio, "ratio", one, m, idleDBCPUPerS))
	}
	for _, r := range restart {
		name := fmt.Sprintf("rolling restart of %d relays", r.LatencyRelays)
		p99 := DeployedCheck{Name: name + ": p99 <= 2 x 1 relay's p99", Rate: r.Rate, Kind: "ratio", Target: deployedRestartP99, Unit: "ratio", Many: r.P99MS}
		var ones []float64
		for _, o := range byKey[key{r.Rate, 1}] {
			if o.Count > 0 {
				ones = append(ones, o.P99MS)
			}
		}
		if len(ones) > 0 && r.Count > 0 {
			p99.One = median(ones)
			p99.Value = r.P99MS / p99.One
			p99.RoundMin, p99.RoundMax, p99.Rounds = r.P99MS/slices.Max(ones), r.P99MS/slices.Min(ones), len(ones)
			p99.Pass = boolp(p99.Value <= p99.Target)
		} else {
			p99.Note = fmt.Sprintf("no 1-relay deployed run at %g/s", r.Rate)
		}
		out = append(out, p99)
		mx := DeployedCheck{Name: name + ": max latency", Rate: r.Rate, Kind: "value", Target: deployedRestartMaxMS, Unit: "ms", Many: r.MaxMS, Value: r.MaxMS, Rounds: 1}
		mx.Pass = boolp(r.Count > 0 && r.MaxMS <= mx.Target)
		out = append(out, mx)
		lost := DeployedCheck{Name: name + ": lost events", Rate: r.Rate, Kind: "value", Unit: "events", Many: float64(r.Lost), Value: float64(r.Lost), Rounds: 1}
		lost.Pass = boolp(r.Lost == 0 && r.Count > 0)
		out = append(out, lost)
		ord := DeployedCheck{Name: name + ": order violations", Rate: r.Rate, Kind: "value", Unit: "pairs", Rounds: 1}
		if r.OrderViolations != nil {
			ord.Many, ord.Value = float64(*r.OrderViolations), float64(*r.OrderViolations)
			ord.Pass = boolp(*r.OrderViolations == 0)
		} else {
			ord.Note = "not checked"
		}
		out = append(out, ord)
	}
	return out
}

func boolp(b bool) *bool { return &b }

// compareRelays compares figure get of the many-relay runs with the
// one-relay runs: Value from the two medians (their ratio or
// difference, by kind), the spread from the pairs of runs of one round
// (Latency.Round; runs without a round pair up in order).
func compareRelays(name string, rate float64, kind string, target float64, unit string, one, many []*Run, get func(*Run) (float64, bool)) DeployedCheck {
	c := DeployedCheck{Name: name, Rate: rate, Kind: kind, Target: target, Unit: unit}
	vo, vm := values(one, get), values(many, get)
	if len(vo) == 0 || len(vm) == 0 {
		c.Note = "not measured"
		return c
	}
	c.One, c.Many = median(vo), median(vm)
	combine := func(m, o float64) float64 {
		if kind == "difference" {
			return m - o
		}
		return m / o
	}
	if kind == "ratio" && c.One <= 0 {
		c.Note = fmt.Sprintf("one relay's figure is %.3g: no ratio", c.One)
		return c
	}
	c.Value = combine(c.Many, c.One)
	c.Pass = boolp(c.Value <= c.Target)
	first := true
	for i, o := range one {
		vo, ok := get(o)
		if !ok || (kind == "ratio" && vo <= 0) {
			continue
		}
		j := slices.IndexFunc(many, func(m *Run) bool { return m.Round == o.Round && m.Round != 0 })
		if o.Round == 0 && i < len(many) {
			j = i
		}
		if j < 0 {
			continue
		}
		vm, ok := get(many[j])
		if !ok {
			continue
		}
		v := combine(vm, vo)
		if first {
			c.RoundMin, c.RoundMax, first = v, v, false
		}
		c.RoundMin, c.RoundMax = min(c.RoundMin, v), max(c.RoundMax, v)
		c.Rounds++
	}
	return c
}

// writeDeployed writes the deployed scenario's runs (each with its cost
// per event) and its verdicts.
func writeDeployed(w io.Writer, runs []*Run, checks []DeployedCheck) {
	if len(runs) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "deployed (plain-SQL writers, relay processes)\trate/s\trelays\tround\tachieved/s\tcount\tlost\tdup\torder viol.\tp50 ms\tp99 ms\tmax ms\tlag p99 ms\tDB CPU ms/ev\trelays' DB CPU ms/ev\trelay procs CPU ms/ev\ttotal CPU ms/ev\trelay xacts/ev\tclaims/s\tempty claims/s\tidle DB CPU s/s\tidle relay CPU s/s\t")
		var restarts []string
		for _, r := range runs {
			rate, ach, count, lat := "idle", "-", "-", "-\t-\t-\t-"
			if r.Scenario != ScenarioDeployedIdle {
				rate, ach, count = fmt.Sprintf("%g", r.Rate), fmt.Sprintf("%.0f", r.AchievedRate), fmt.Sprint(r.Count)
				lat = fmt.Sprintf("%.2f\t%.2f\t%.1f\t%.1f", r.P50MS, r.P99MS, r.MaxMS, r.LagP99MS)
			}
			ov := "-"
			if r.OrderViolations != nil {
				ov = fmt.Sprint(*r.OrderViolations)
			}
			dbcpu, relDB, relProc, total, xacts, idleDB, idleRelay := "-", "-", "-", "-", "-", "-", "-"
			claims, empty := fmt.Sprintf("%.1f", r.ClaimsPerS), fmt.Sprintf("%.1f", r.EmptyClaimsPerS)
			switch r.Scenario {
			case ScenarioDeployedIdle:
				claims, empty = fmt.Sprintf("%.1f", r.IdleClaimsPerS), "-"
			case ScenarioDeployedRestart:
				claims, empty = "-", "-" // the replaced processes' counters are gone
			}
			if c := r.Cost; c != nil {
				dbcpu, relDB, relProc, xacts = optF(c.DBCPUMSPerEvent, "%.3f"), optF(c.RelayDBCPUMSPerEvent, "%.3f"), optF(c.RelayCPUMSPerEvent, "%.3f"), optF(c.RelayXactsPerEvent, "%.2f")
				if v, ok := totalCPUPerEvent(r); ok {
					total = fmt.Sprintf("%.3f", v)
				}
				if r.Scenario == ScenarioDeployedIdle {
					if v, ok := idleDBCPUPerS(r); ok {
						idleDB = fmt.Sprintf("%.4f", v)
					}
					if c.RelayCPUS != nil && c.CostWindowS > 0 {
						idleRelay = fmt.Sprintf("%.4f", *c.RelayCPUS/c.CostWindowS)
					}
				}
			}
			if r.Scenario == ScenarioDeployedRestart {
				for _, x := range r.Restarts {
					restarts = append(restarts, fmt.Sprintf("relay %s at %.1fs: SIGTERM to exit %.2fs, replacement ready in %.2fs", x.RelayID, x.AtS, x.StopS, x.StartS))
				}
			}
			round := "-"
			if r.Round > 0 {
				round = fmt.Sprint(r.Round)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
				r.Scenario, rate, max(r.LatencyRelays, 1), round, ach, count, r.Lost, r.Duplicates, ov, lat,
				dbcpu, relDB, relProc, total, xacts, claims, empty, idleDB, idleRelay, errNote(r))
		}
		tw.Flush()
		for _, x := range restarts {
			fmt.Fprintln(w, "rolling restart: "+x)
		}
		fmt.Fprintln(w, "(relays' DB CPU: the run's DB CPU per event minus the plain-SQL writers-only baseline's at the rate; relay procs CPU: the relay processes' own, summed; total: the two added; idle: the whole cluster's CPU per second, background processes included)")
		fmt.Fprintln(w)
	}
	if len(checks) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "deployed goal\trate/s\t1 relay\tN relays\tvalue\ttarget\tresult\trounds: min .. max\t")
	for _, c := range checks {
		rate := "idle"
		if c.Rate > 0 {
			rate = fmt.Sprintf("%g", c.Rate)
		}
		res, val := "n/a", "-"
		if c.Pass != nil {
			res = "FAIL"
			if *c.Pass {
				res = "PASS"
			}
			val = fmtCheck(c.Value, c.Kind, c.Unit)
		}
		one, many := fmt.Sprintf("%.4g", c.One), fmt.Sprintf("%.4g", c.Many)
		target := "<= " + fmtCheck(c.Target, c.Kind, c.Unit)
		spread := "-"
		if c.Rounds > 1 {
			spread = fmt.Sprintf("%s .. %s (%d)", fmtCheck(c.RoundMin, c.Kind, c.Unit), fmtCheck(c.RoundMax, c.Kind, c.Unit), c.Rounds)
		}
		if strings.HasPrefix(c.Name, "rolling restart") {
			one = "-"
			if c.One > 0 {
				one = fmt.Sprintf("p99 %.4g", c.One)
			}
			if c.Kind == "ratio" {
				target = fmt.Sprintf("<= %g %s", c.Target, deployedRestartFactor)
			}
		}
		if c.Note != "" {
			res += " (" + c.Note + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", c.Name, rate, one, many, val, target, res, spread)
	}
	tw.Flush()
	fmt.Fprintln(w, "(1 relay, N relays: medians over the rounds; value: their ratio (difference for p50); rounds: the same figure for each round's pair of runs; rolling restart: N relays is the restart run's figure)")
	fmt.Fprintln(w)
}

// fmtCheck formats a check's figure.
func fmtCheck(v float64, kind, unit string) string {
	switch {
	case kind == "ratio":
		return fmt.Sprintf("%.2fx", v)
	case kind == "difference":
		return fmt.Sprintf("%+.2f %s", v, unit)
	}
	return fmt.Sprintf("%.4g %s", v, unit)
}
