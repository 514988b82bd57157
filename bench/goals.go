package bench

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// Goal is one target the relay must meet and what a report measured for
// it.
type Goal struct {
	// Name says what is measured, e.g. "1000/s p99 latency".
	Name string `json:"name"`
	// Target is the bound, in Unit: at most (Op "<=") or at least (">=").
	Target float64 `json:"target"`
	Op     string  `json:"op"`
	Unit   string  `json:"unit"`
	// Value is the measured figure in Unit; null when the report has no
	// such measurement (scenario not run, run failed, figure unavailable).
	Value *float64 `json:"value"`
	// Pass is whether Value meets Target; null when Value is.
	Pass *bool `json:"pass"`
	// Run names the run the value comes from.
	Run string `json:"run,omitempty"`
	// Relative is true when Target comes from the run itself (the
	// broker's floor measured in it); 0 when not measured.
	Relative bool `json:"relative,omitempty"`
}

// goalSpec is how a Goal is found in the runs.
type goalSpec struct {
	name   string
	target float64
	op     string
	unit   string
	// pick returns the value and the run's label, or ok false.
	pick func(runs []Run) (v float64, run string, ok bool)
}

// relativeGoalSpec is a goal whose bound depends on the run: the broker's
// floor measured in it. Its op is "<=".
type relativeGoalSpec struct {
	name, unit string
	// pick returns the value, the bound and the run's label, or ok false.
	pick func(runs []Run) (v, target float64, run string, ok bool)
}

// floorGoal compares the product run's figure at rate with a bound
// computed from the broker's floor measured in the same run (the floor
// probe, LatencyConfig.FloorProbeRate); no floor: not measured.
func floorGoal(rate float64, writer string, f func(r *Run) (v, target float64)) func([]Run) (float64, float64, string, bool) {
	return func(runs []Run) (float64, float64, string, bool) {
		r := productRun(runs, rate, writer)
		if r == nil || r.FloorCount == 0 {
			return 0, 0, "", false
		}
		v, target := f(r)
		return v, target, costLabel(r), true
	}
}

// productRun returns the last successful latency run of the product relay
// (notify-proc, else notify) at rate with writers of kind writer ("":
// outbox.Writer; Run.WriterKind).
func productRun(runs []Run, rate float64, writer string) *Run {
	var found *Run
	for _, mode := range []string{ModeNotify, ModeNotifyProc} {
		for i := range runs {
			r := &runs[i]
			if r.Scenario == ScenarioLatency && r.Mode == mode && r.Latency != nil && r.Error == "" && r.Rate == rate && r.Count > 0 && r.WriterKind == writer {
				found = r
			}
		}
	}
	return found
}

// latencyGoal picks figure f of the product run at rate.
func latencyGoal(rate float64, f func(r *Run) (float64, bool)) func([]Run) (float64, string, bool) {
	return func(runs []Run) (float64, string, bool) {
		r := productRun(runs, rate, "")
		if r == nil {
			return 0, "", false
		}
		v, ok := f(r)
		return v, costLabel(r), ok
	}
}

func deref(p *float64) (float64, bool) {
	if p == nil {
		return 0, false
	}
	return *p, true
}

// lastRun returns the last successful run of scenario.
func lastRun(runs []Run, scenario string) *Run {
	var found *Run
	for i := range runs {
		if runs[i].Scenario == scenario && runs[i].Error == "" {
			found = &runs[i]
		}
	}
	return found
}

// goalSpecs are the relay's targets (the issues'): commit-to-publish at
// 1,000, 10,000 and 10 events/s with default settings, what the relay
// costs the database per event at 1,000/s, its idle cost, a burst after
// a long idle period against one after a short one, at 500/s against the
// broker's own floor (relative targets), a large backlog, and the relay's
// memory with large payloads.
var goalSpecs = []goalSpec{
	{"1000/s p50 latency", 1.5, "<=", "ms", latencyGoal(1000, func(r *Run) (float64, bool) { return r.P50MS, true })},
	{"1000/s p99 latency", 6, "<=", "ms", latencyGoal(1000, func(r *Run) (float64, bool) { return r.P99MS, true })},
	{"1000/s max latency", 30, "<=", "ms", latencyGoal(1000, func(r *Run) (float64, bool) { return r.MaxMS, true })},
	{"1000/s relay DB CPU per event", 0.1, "<=", "ms", latencyGoal(1000, func(r *Run) (float64, bool) {
		if r.Cost == nil {
			return 0, false
		}
		return deref(r.RelayDBCPUMSPerEvent)
	})},
	{"1000/s relay transactions per event", 0.3, "<=", "xacts", latencyGoal(1000, func(r *Run) (float64, bool) {
		if r.Cost == nil {
			return 0, false
		}
		return deref(r.RelayXactsPerEvent)
	})},
	{"10000/s p99 latency", 15, "<=", "ms", latencyGoal(10000, func(r *Run) (float64, bool) { return r.P99MS, true })},
	{"10/s p99 latency", 6, "<=", "ms", latencyGoal(10, func(r *Run) (float64, bool) { return r.P99MS, true })},
	{"idle DB transactions/s", 3, "<=", "xacts/s", func(runs []Run) (float64, string, bool) {
		r := lastRun(runs, ScenarioBurst)
		if r == nil || r.Burst == nil || r.IdleCostWindowS <= 0 {
			return 0, "", false
		}
		return r.IdleDBXactsPerS, fmt.Sprintf("burst: idle %gs", r.IdleS), true
	}},
	{"idle relay CPU per 10 s", 0.05, "<=", "CPU-s", func(runs []Run) (float64, string, bool) {
		r := lastRun(runs, ScenarioBurst)
		if r == nil || r.Burst == nil || r.IdleCostWindowS <= 0 {
			return 0, "", false
		}
		v, ok := deref(r.IdleRelayCPUSPer10S)
		return v, fmt.Sprintf("burst: idle %gs", r.IdleS), ok
	}},
	{"burst drain after long idle / after short idle", 0.8, ">=", "ratio", func(runs []Run) (float64, string, bool) {
		r := lastRun(runs, ScenarioBurst)
		if r == nil || r.Burst == nil || r.BurstRatio <= 0 {
			return 0, "", false
		}
		return r.BurstRatio, fmt.Sprintf("burst: %d events after %gs vs %gs idle", r.BurstEvents, r.IdleS, r.ShortIdleS), true
	}},
	{"several relays / one relay (worst scale run)", 1.0, ">=", "ratio", worstScaleRatio},
	{"steady traffic p99, 3 relays / 1 relay", 1.5, "<=", "ratio", func(runs []Run) (float64, string, bool) {
		for i := range runs {
			r := &runs[i]
			if r.Scenario == ScenarioScaleLatency && r.Scale != nil && r.LatencyRelays == 3 && r.Error == "" && r.P99RatioToOneRelay > 0 {
				return r.P99RatioToOneRelay, fmt.Sprintf("%s %g/s over %d aggregates", costLabel(r), r.Rate, r.Aggregates), true
			}
		}
		return 0, "", false
	}},
	{"relay peak RSS, 900 KB payloads", 256, "<=", "MiB", func(runs []Run) (float64, string, bool) {
		r := lastRun(runs, ScenarioLargePayloads)
		if r == nil || r.Drain == nil || r.RelayVmHWMMiB <= 0 {
			return 0, "", false
		}
		return r.RelayVmHWMMiB, fmt.Sprintf("large-payloads: %d events", r.Events), true
	}},
	{"backlog drain", 50000, ">=", "events/s", func(runs []Run) (float64, string, bool) {
		r := lastRun(runs, ScenarioBacklog)
		if r == nil || r.Drain == nil || r.EventsPerS <= 0 {
			return 0, "", false
		}
		return r.EventsPerS, fmt.Sprintf("backlog: %d events", r.Events), true
	}},
}

// worstScaleRatio is the lowest RatioToOneRelay of the successful scale
// runs with more than one relay: the goal that several relays never
// drain slower than one.
func worstScaleRatio(runs []Run) (float64, string, bool) {
	var worst *Run
	for i := range runs {
		r := &runs[i]
		if r.Scale == nil || r.Drain == nil || r.Relays < 2 || r.Error != "" || r.RatioToOneRelay <= 0 {
			continue
		}
		if worst == nil || r.RatioToOneRelay < worst.RatioToOneRelay {
			worst = r
		}
	}
	if worst == nil {
		return 0, "", false
	}
	return worst.RatioToOneRelay, costLabel(worst), true
}

// relativeGoals are the goals on a real broker (issue 18): within the
// broker's own produce-to-consume latency measured in the same run under
// the same load (the floor probe). n/a without a 500/s product run with a
// floor probe.
var relativeGoals = []relativeGoalSpec{
	{"500/s p50 latency <= broker floor p50 + 2 ms", "ms", floorGoal(500, "", func(r *Run) (float64, float64) {
		return r.P50MS, r.FloorP50MS + 2
	})},
	{"500/s p99 latency <= 3 x broker floor p99", "ms", floorGoal(500, "", func(r *Run) (float64, float64) {
		return r.P99MS, 3 * r.FloorP99MS
	})},
	// Issue 29, goal 4: the same with the README's plain-SQL writers (a
	// pg_notify in every transaction).
	{"500/s plain-SQL p50 latency <= broker floor p50 + 2 ms", "ms", floorGoal(500, WriterPlainSQL, func(r *Run) (float64, float64) {
		return r.P50MS, r.FloorP50MS + 2
	})},
	{"500/s plain-SQL p99 latency <= 3 x broker floor p99", "ms", floorGoal(500, WriterPlainSQL, func(r *Run) (float64, float64) {
		return r.P99MS, 3 * r.FloorP99MS
	})},
}

// EvaluateGoals checks runs against the relay's targets and returns one
// Goal per target, in a fixed order; a target with no measurement in runs
// has a null Value and Pass.
func EvaluateGoals(runs []Run) []Goal {
	out := make([]Goal, 0, len(goalSpecs)+len(relativeGoals))
	for _, g := range goalSpecs {
		goal := Goal{Name: g.name, Target: g.target, Op: g.op, Unit: g.unit}
		if v, run, ok := g.pick(runs); ok {
			pass := v <= g.target
			if g.op == ">=" {
				pass = v >= g.target
			}
			goal.Value, goal.Pass, goal.Run = f64(v), &pass, run
		}
		out = append(out, goal)
	}
	for _, g := range relativeGoals {
		goal := Goal{Name: g.name, Op: "<=", Unit: g.unit, Relative: true}
		if v, target, run, ok := g.pick(runs); ok {
			pass := v <= target
			goal.Value, goal.Target, goal.Pass, goal.Run = f64(v), target, &pass, run
		}
		out = append(out, goal)
	}
	return out
}

// writeGoals writes the goals table: target, measured value, PASS, FAIL
// or "n/a" (not measured), and the run.
func writeGoals(w io.Writer, goals []Goal) {
	if len(goals) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "goal\ttarget\tmeasured\tresult\trun\t")
	for _, g := range goals {
		val, res := "-", "n/a"
		if g.Value != nil {
			val = fmtGoal(*g.Value, g.Unit)
			res = "FAIL"
			if g.Pass != nil && *g.Pass {
				res = "PASS"
			}
		}
		target := g.Op + " " + fmtGoal(g.Target, g.Unit)
		if g.Relative && g.Value == nil {
			target = "(from the run's floor)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", g.Name, target, val, res, g.Run)
	}
	tw.Flush()
}

// fmtGoal formats v in unit with a precision that suits it.
func fmtGoal(v float64, unit string) string {
	switch unit {
	case "events/s":
		return fmt.Sprintf("%.0f %s", v, unit)
	case "ratio":
		return fmt.Sprintf("%.2f", v)
	case "ms", "CPU-s", "xacts", "xacts/s":
		return fmt.Sprintf("%.3g %s", v, unit)
	case "MiB":
		return fmt.Sprintf("%.1f %s", v, unit)
	}
	return fmt.Sprintf("%g %s", v, unit)
}
