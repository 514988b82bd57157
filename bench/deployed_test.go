package bench

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestOrderViolations: a later event of an aggregate received at a lower
// offset, or on another partition, is a violation when its transaction
// began after the earlier one's commit; overlapping transactions, events
// not received and other aggregates are not.
func TestOrderViolations(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// Two aggregates: events 0, 2, 4, 6 are aggregate 0; 1, 3, 5, 7 aggregate 1.
	began := []time.Time{at(0), at(1), at(10), at(11), at(20), at(21), at(30), at(31)}
	commit := []time.Time{at(5), at(6), at(15), at(16), at(25), at(26), at(35), at(36)}
	part := []int32{0, 1, 0, 1, 0, 1, 0, 1}
	off := []int64{0, 0, 1, 1, 2, 2, 3, 3}
	if v := orderViolations(2, began, commit, part, off); v != 0 {
		t.Fatalf("in order: %d violations, want 0", v)
	}
	swapped := slices.Clone(off)
	swapped[2], swapped[4] = 2, 1 // aggregate 0: event 4 before event 2
	if v := orderViolations(2, began, commit, part, swapped); v != 1 {
		t.Fatalf("swapped: %d violations, want 1", v)
	}
	moved := slices.Clone(part)
	moved[7] = 0 // aggregate 1's last event on another partition
	if v := orderViolations(2, began, commit, moved, off); v != 1 {
		t.Fatalf("other partition: %d violations, want 1", v)
	}
	// Overlapping transactions (event 4 began before event 2 committed)
	// have no order to keep.
	overlap := slices.Clone(began)
	overlap[4] = at(12)
	if v := orderViolations(2, overlap, commit, part, swapped); v != 0 {
		t.Fatalf("overlapping: %d violations, want 0", v)
	}
	// An event not received (-1) or not committed is skipped: 6 follows 2.
	lost := slices.Clone(off)
	lost[4] = -1
	lost[6] = 0 // before 2 (offset 1): a violation against 2
	if v := orderViolations(2, began, commit, part, lost); v != 1 {
		t.Fatalf("skipped: %d violations, want 1", v)
	}
	uncommitted := slices.Clone(commit)
	uncommitted[4] = time.Time{}
	if v := orderViolations(2, began, uncommitted, part, off); v != 0 {
		t.Fatalf("uncommitted: %d violations, want 0", v)
	}
}

func deployedRun(rate float64, relays, round int, p50, p99, relayDB, relayProc float64) Run {
	return Run{Scenario: ScenarioDeployed, Mode: ModeNotifyProc,
		Latency: &Latency{Rate: rate, LatencyRelays: relays, Round: round, Count: 1000, P50MS: p50, P99MS: p99},
		Cost:    &Cost{CostEvents: 1000, RelayDBCPUMSPerEvent: f64(relayDB), RelayCPUMSPerEvent: f64(relayProc)}}
}

func idleRun(relays, round int, dbCPU, window float64) Run {
	return Run{Scenario: ScenarioDeployedIdle, Mode: ModeNotifyProc,
		Latency: &Latency{LatencyRelays: relays, Round: round},
		Cost:    &Cost{CostWindowS: window, DBCPUS: f64(dbCPU)}}
}

func checkNamed(t *testing.T, checks []DeployedCheck, rate float64, prefix string) DeployedCheck {
	t.Helper()
	for _, c := range checks {
		if c.Rate == rate && strings.HasPrefix(c.Name, prefix) {
			return c
		}
	}
	t.Fatalf("no check %q at %g/s in %+v", prefix, rate, checks)
	return DeployedCheck{}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestEvaluateDeployed: the 3/1 figures come from the medians over the
// rounds, the spread from each round's pair; the goals' bounds are issue
// 29's; the rolling restart is judged against one relay's p99 at its rate.
func TestEvaluateDeployed(t *testing.T) {
	if EvaluateDeployed([]Run{{Scenario: ScenarioLatency, Latency: &Latency{Rate: 500}}}) != nil {
		t.Fatal("no deployed runs: want nil")
	}
	ov := int64(0)
	restart := Run{Scenario: ScenarioDeployedRestart, Mode: ModeNotifyProc,
		Latency: &Latency{Rate: 500, LatencyRelays: 3, Count: 1000, P99MS: 25, MaxMS: 300, OrderViolations: &ov}}
	runs := []Run{
		// 500/s, round 1: 1 then 3; round 2: 3 then 1.
		deployedRun(500, 1, 1, 2, 10, 0.40, 0.30),
		deployedRun(500, 3, 1, 2.5, 30, 0.44, 0.36),
		deployedRun(500, 3, 2, 3.5, 18, 0.50, 0.40),
		deployedRun(500, 1, 2, 2, 12, 0.40, 0.30),
		{Scenario: ScenarioDeployed, Mode: ModeNotifyProc, Error: "boom", Latency: &Latency{Rate: 500, LatencyRelays: 3, Round: 3, P99MS: 1000}},
		deployedRun(1000, 1, 1, 1, 5, 0, 0.2), // one relay's DB share 0: no ratio
		deployedRun(1000, 3, 1, 1.2, 6, 0.1, 0.2),
		idleRun(1, 1, 0.10, 10),
		idleRun(3, 1, 0.12, 10),
		idleRun(3, 2, 0.20, 10),
		idleRun(1, 2, 0.10, 10),
		restart,
	}
	checks := EvaluateDeployed(runs)

	db := checkNamed(t, checks, 500, "relays' DB CPU per event, 3 / 1")
	// medians: one 0.40, three (0.44+0.50)/2 = 0.47; rounds 1.10 and 1.25.
	if !near(db.One, 0.40) || !near(db.Many, 0.47) || !near(db.Value, 0.47/0.40) || db.Pass == nil || *db.Pass {
		t.Errorf("DB CPU: %+v, want 0.47/0.40 = 1.175, FAIL", db)
	}
	if db.Rounds != 2 || !near(db.RoundMin, 1.1) || !near(db.RoundMax, 1.25) || db.Target != 1.15 {
		t.Errorf("DB CPU spread: %+v, want 2 rounds 1.10 .. 1.25, target 1.15", db)
	}
	total := checkNamed(t, checks, 500, "total CPU per event")
	// one 0.70, three (0.80+0.90)/2 = 0.85: 1.214 <= 1.25.
	if !near(total.Value, 0.85/0.70) || total.Pass == nil || !*total.Pass || total.Target != 1.25 {
		t.Errorf("total CPU: %+v, want 0.85/0.70, PASS", total)
	}
	p50 := checkNamed(t, checks, 500, "p50 latency")
	// one 2, three 3: +1 ms (<= 1: PASS); rounds +0.5, +1.5.
	if p50.Kind != "difference" || !near(p50.Value, 1) || p50.Pass == nil || !*p50.Pass || !near(p50.RoundMin, 0.5) || !near(p50.RoundMax, 1.5) {
		t.Errorf("p50: %+v, want +1 ms PASS, rounds 0.5 .. 1.5", p50)
	}
	p99 := checkNamed(t, checks, 500, "p99 latency")
	// one 11, three 24 (the failed run left out): 2.18 > 2.
	if !near(p99.Value, 24.0/11) || p99.Pass == nil || *p99.Pass || !near(p99.RoundMin, 1.5) || !near(p99.RoundMax, 3) {
		t.Errorf("p99: %+v, want 24/11 FAIL, rounds 1.5 .. 3", p99)
	}
	zero := checkNamed(t, checks, 1000, "relays' DB CPU per event")
	if zero.Pass != nil || zero.Note == "" {
		t.Errorf("zero one-relay share: %+v, want n/a with a note", zero)
	}
	idle := checkNamed(t, checks, 0, "idle DB CPU per second")
	// 0.010 /s against (0.012+0.020)/2 = 0.016 /s: 1.6 > 1.5.
	if !near(idle.Value, 1.6) || idle.Pass == nil || *idle.Pass || idle.Target != 1.5 || !near(idle.RoundMin, 1.2) || !near(idle.RoundMax, 2) {
		t.Errorf("idle: %+v, want 1.6 FAIL, rounds 1.2 .. 2", idle)
	}
	rp99 := checkNamed(t, checks, 500, "rolling restart of 3 relays: p99")
	// 25 against one relay's median p99 11: 2.27 > 2.
	if !near(rp99.One, 11) || !near(rp99.Value, 25.0/11) || rp99.Pass == nil || *rp99.Pass {
		t.Errorf("restart p99: %+v, want 25/11 FAIL", rp99)
	}
	rmax := checkNamed(t, checks, 500, "rolling restart of 3 relays: max")
	if rmax.Pass == nil || *rmax.Pass || rmax.Target != 250 {
		t.Errorf("restart max: %+v, want 300 ms > 250 FAIL", rmax)
	}
	for _, name := range []string{"rolling restart of 3 relays: lost", "rolling restart of 3 relays: order"} {
		if c := checkNamed(t, checks, 500, name); c.Pass == nil || !*c.Pass {
			t.Errorf("%s: %+v, want PASS", name, c)
		}
	}

	var buf bytes.Buffer
	var ptrs []*Run
	for i := range runs {
		ptrs = append(ptrs, &runs[i])
	}
	writeDeployed(&buf, ptrs, checks)
	out := buf.String()
	for _, want := range []string{"deployed goal", "PASS", "FAIL", "1.10x .. 1.25x (2)", "n/a (one relay's figure is 0: no ratio)"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// TestDeployedConfig: defaults are issue 29's setup; a relay count below
// two is refused; every relay gets a --relay-id of its own.
func TestDeployedConfig(t *testing.T) {
	var c DeployedConfig
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Rates, []float64{500, 1000}) || c.Relays != 3 || c.Aggregates != 200 || c.RestartRate != 500 ||
		c.RestartInterval != 8*time.Second || c.Relay.Mode != ModeNotifyProc || c.Relay.RelayID == "" {
		t.Fatalf("defaults: %+v", c)
	}
	if got := relayArgs([]string{"b:9092"}, "t", "ch", "127.0.0.1:1", RelayConfig{Mode: ModeNotifyProc, ProcDefaults: true, RelayID: c.Relay.memberID(2)}); !slices.Contains(got, "bench-relay-2") {
		t.Fatalf("relay args %v lack --relay-id bench-relay-2", got)
	}
	if got := relayArgs([]string{"b:9092"}, "t", "ch", "127.0.0.1:1", RelayConfig{Mode: ModeNotifyProc}); slices.Contains(got, "--relay-id") {
		t.Fatalf("relay args %v: --relay-id without a RelayID", got)
	}
	bad := DeployedConfig{Relays: 1}
	if err := bad.validate(); err == nil {
		t.Fatal("Relays 1: want an error")
	}
	if got := roundOrder([]int{1, 3}, 1); !slices.Equal(got, []int{3, 1}) {
		t.Fatalf("round 2 order %v, want [3 1]", got)
	}
}

// TestLatencyConfigDeployedFields: plain-SQL writers need a database and
// notify themselves; a rolling restart needs several relay processes and
// time for every restart.
func TestLatencyConfigDeployedFields(t *testing.T) {
	ok := LatencyConfig{Mode: ModeNotifyProc, Writer: WriterPlainSQL, Relays: 3, Duration: 32 * time.Second, RollingRestart: 8 * time.Second}
	if err := ok.validate(); err != nil {
		t.Fatal(err)
	}
	if ok.wakeupName() != WriterPlainSQL {
		t.Fatalf("wake-up name %q, want %s", ok.wakeupName(), WriterPlainSQL)
	}
	for _, c := range []LatencyConfig{
		{Mode: ModeFloor, Writer: WriterPlainSQL},
		{Mode: ModeWritersOnly, Writer: WriterPlainSQL, WakeupMode: "none"},
		{Mode: ModeNotify, Writer: "cobol"},
		{Mode: ModeNotify, Relays: 3, Duration: time.Minute, RollingRestart: time.Second},
		{Mode: ModeNotifyProc, Relays: 1, Duration: time.Minute, RollingRestart: time.Second},
		{Mode: ModeNotifyProc, Relays: 3, Duration: 20 * time.Second, RollingRestart: 8 * time.Second},
	} {
		if err := c.validate(); err == nil {
			t.Errorf("%+v: want an error", c)
		}
	}
}
