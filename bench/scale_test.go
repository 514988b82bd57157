package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/testenv"
)

// TestScale runs the scale scenario small: 1 and 2 relay processes, a
// drain and a burst of 3,000 events over 20 aggregates. Every event
// arrives, the two-relay runs have their ratio, the burst waited for the
// relays to settle and the table and goal show. It asserts no speed
// target.
func TestScale(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/outbox-relay")
	}
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bin, err := BuildRelay(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	env := &Env{DSN: db.ConnString, Brokers: k.Brokers, Log: testenv.Logger(t), RelayBin: bin}
	runs, err := env.Scale(ctx, ScaleConfig{Relays: []int{1, 2}, Aggregates: []int{20}, Events: 3000, Timeout: time.Minute,
		LatencyRate: 200, LatencyDuration: 2 * time.Second, LatencyAggregates: 20, Relay: RelayConfig{ProcDefaults: true}, Rounds: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 6 {
		t.Fatalf("%d runs, want 6", len(runs))
	}
	for _, r := range runs[4:] {
		t.Logf("%s x%d: p50 %.2f ms, p99 %.2f ms, ratio %.2f", r.Scenario, r.LatencyRelays, r.P50MS, r.P99MS, r.P99RatioToOneRelay)
		if r.Error != "" || r.Scenario != ScenarioScaleLatency || r.Count != r.Committed || r.Count == 0 || r.P99RatioToOneRelay <= 0 {
			t.Errorf("%s x%d: error %q, count %d of %d, p99 ratio %v", r.Scenario, r.LatencyRelays, r.Error, r.Count, r.Committed, r.P99RatioToOneRelay)
		}
	}
	if runs[5].LatencyRelays != 2 {
		t.Errorf("the second scale-latency run has %d relays, want 2", runs[5].LatencyRelays)
	}
	for _, r := range runs[:4] {
		t.Logf("%s x%d: %.0f events/s, ratio %.2f, settle %.2fs, claims %d", r.Scenario, r.Relays, r.EventsPerS, r.RatioToOneRelay, r.SettleS, r.Claims)
		if r.Error != "" {
			t.Errorf("%s x%d: %s", r.Scenario, r.Relays, r.Error)
			continue
		}
		if r.Received != 3000 || r.EventsPerS <= 0 || r.RatioToOneRelay <= 0 || r.Aggregates != 20 || r.Cost == nil || r.Claims <= 0 {
			t.Errorf("%s x%d: received %d, events/s %v, ratio %v, aggregates %d, cost %v, claims %d",
				r.Scenario, r.Relays, r.Received, r.EventsPerS, r.RatioToOneRelay, r.Aggregates, r.Cost, r.Claims)
		}
		if r.Scenario == ScenarioScaleBurst && r.SettleS <= 0 {
			t.Errorf("burst x%d: no settle time", r.Relays)
		}
	}
	if runs[0].RatioToOneRelay != 1 || runs[0].Relays != 1 || runs[0].Scenario != ScenarioScaleDrain || runs[2].Scenario != ScenarioScaleBurst {
		t.Errorf("runs out of order: %+v", runs)
	}
	rep := &Report{Runs: runs, Goals: EvaluateGoals(runs)}
	var out bytes.Buffer
	rep.WriteTable(&out)
	for _, want := range []string{"scale (relay processes)", "several relays / one relay", "scale-latency notify-proc x2"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table has no %q:\n%s", want, out.String())
		}
	}
	t.Logf("\n%s", out.String())
}

// TestScaleConfigValidate names the bad field.
func TestScaleConfigValidate(t *testing.T) {
	for _, c := range []ScaleConfig{
		{Relays: []int{0}},
		{Aggregates: []int{-1}},
		{Kinds: []string{"drain"}},
		{Events: -5},
	} {
		err := c.validate()
		if err == nil || !strings.Contains(err.Error(), "ScaleConfig.") {
			t.Errorf("%+v: %v", c, err)
		}
	}
	var c ScaleConfig
	if err := c.validate(); err != nil || len(c.Relays) != 3 || len(c.Aggregates) != 3 || c.Events != 100000 {
		t.Fatalf("defaults: %v %+v", err, c)
	}
}

// TestMedianRun reports the median successful round, with every round's
// events/s, and the first round when none succeeded.
func TestMedianRun(t *testing.T) {
	run := func(evps float64, err string) Run {
		return Run{Drain: &Drain{EventsPerS: evps}, Scale: &Scale{}, Error: err}
	}
	m := medianRun([]Run{run(300, ""), run(100, ""), run(900, "boom"), run(200, "")})
	if m.EventsPerS != 200 || len(m.RoundsEventsPerS) != 4 || m.RoundsEventsPerS[2] != 900 {
		t.Errorf("median %v, rounds %v", m.EventsPerS, m.RoundsEventsPerS)
	}
	m = medianRun([]Run{run(400, ""), run(100, "")})
	if m.EventsPerS != 100 {
		t.Errorf("median of two: %v, want the lower", m.EventsPerS)
	}
	m = medianRun([]Run{run(0, "first"), run(0, "second")})
	if m.Error != "first" {
		t.Errorf("no success: %q", m.Error)
	}
	if m := medianRun([]Run{run(5, "")}); m.RoundsEventsPerS != nil {
		t.Errorf("one round lists its rounds: %v", m.RoundsEventsPerS)
	}
	c := ScaleConfig{Rounds: -1}
	if err := c.validate(); err == nil || !strings.Contains(err.Error(), "ScaleConfig.Rounds") {
		t.Errorf("Rounds -1: %v", err)
	}
}
