package bench

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/outbox"
)

func TestSummarize(t *testing.T) {
	h := NewHistogram()
	// 1ms..100ms, one value each.
	for i := 1; i <= 100; i++ {
		RecordDuration(h, time.Duration(i)*time.Millisecond)
	}
	s := Summarize(h)
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > want*0.002+0.001 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if s.Count != 100 {
		t.Errorf("Count = %d, want 100", s.Count)
	}
	near("Mean", s.Mean, 50.5)
	near("P50", s.P50, 50)
	near("P90", s.P90, 90)
	near("P99", s.P99, 99)
	near("P999", s.P999, 100)
	near("Max", s.Max, 100)
	near("Min", s.Min, 1)
}

func TestSummarizeEmpty(t *testing.T) {
	if s := Summarize(NewHistogram()); s != (Summary{}) {
		t.Errorf("Summarize(empty) = %+v, want zeros", s)
	}
	if s := Summarize(nil); s != (Summary{}) {
		t.Errorf("Summarize(nil) = %+v, want zeros", s)
	}
}

func TestRecordDurationClamps(t *testing.T) {
	h := NewHistogram()
	RecordDuration(h, -time.Second)
	RecordDuration(h, time.Hour)
	if h.TotalCount() != 2 {
		t.Fatalf("count = %d, want 2", h.TotalCount())
	}
	if h.Min() != histMinUS {
		t.Errorf("min = %d µs, want %d", h.Min(), histMinUS)
	}
	if got := h.Max(); got < histMaxUS*999/1000 {
		t.Errorf("max = %d µs, want about %d", got, histMaxUS)
	}
}

func TestCDF(t *testing.T) {
	h := NewHistogram()
	for i := 1; i <= 10000; i++ {
		RecordDuration(h, time.Duration(i)*time.Microsecond*10)
	}
	pts := CDF(h, 50)
	if len(pts) == 0 || len(pts) > 50 {
		t.Fatalf("len = %d, want 1..50", len(pts))
	}
	for i := 1; i < len(pts); i++ {
		if pts[i].LatencyMS < pts[i-1].LatencyMS || pts[i].Fraction < pts[i-1].Fraction {
			t.Fatalf("not ascending at %d: %+v then %+v", i, pts[i-1], pts[i])
		}
	}
	if last := pts[len(pts)-1]; last.Fraction != 1 || math.Abs(last.LatencyMS-100) > 0.2 {
		t.Errorf("last point = %+v, want fraction 1 at about 100ms", last)
	}
	if CDF(NewHistogram(), 10) != nil {
		t.Error("CDF(empty) is not nil")
	}
}

func TestPayload(t *testing.T) {
	for _, n := range []int{1, 10, 100, 4096} {
		p := payload(n)
		if !json.Valid(p) {
			t.Fatalf("payload(%d) is not JSON: %s", n, p)
		}
		if n >= 10 && len(p) != n {
			t.Errorf("len(payload(%d)) = %d", n, len(p))
		}
	}
}

// TestJSONShape checks the keys the schema requires, including
// zero values that must not be omitted.
func TestJSONShape(t *testing.T) {
	rep := Report{Machine: Machine{CPU: "x", Cores: 2}, Runs: []Run{
		{Scenario: ScenarioLatency, Mode: ModeNotify, DurationS: 30, Latency: &Latency{PollIntervalMS: 500, Rate: 1000}},
		{Scenario: ScenarioDrain, Mode: ModeNotify, Drain: &Drain{Relays: 1, Events: 200000}},
		{Scenario: ScenarioDrain, Mode: ModeSQLCeiling, Drain: &Drain{Relays: 1, Events: 200000}},
		{Scenario: ScenarioWriters, Mode: ModeNotify, Writers: &Writers{Connections: 16, Wakeups: true}},
		{Scenario: ScenarioBrokerDown, Mode: ModeNotify, BrokerDown: &BrokerDown{OutageS: 20, Count: 5}},
		{Scenario: ScenarioDrain, Mode: ModeNotifyProc, Drain: &Drain{Relays: 1, Events: 1000, RelayRSSMaxMiB: 20, RelayVmHWMMiB: 21}},
	}}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Machine map[string]any   `json:"machine"`
		Runs    []map[string]any `json:"runs"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"cpu", "cores", "memory_mb", "go_version", "postgres", "kernel"} {
		if _, ok := got.Machine[k]; !ok {
			t.Errorf("machine: no key %q", k)
		}
	}
	want := [][]string{
		{"scenario", "mode", "poll_interval_ms", "rate", "duration_s", "count", "lost", "duplicates", "mean_ms", "p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms"},
		{"scenario", "mode", "relays", "events", "events_per_s"},
		{"scenario", "mode", "relays", "events", "events_per_s"},
		{"scenario", "connections", "wakeups", "commits_per_s"},
		{"scenario", "mode", "outage_s", "rss_before_mib", "rss_max_outage_mib", "rss_max_recovery_mib", "recovery_s", "count", "lost"},
		{"scenario", "mode", "relays", "events", "events_per_s", "relay_rss_max_mib", "relay_vmhwm_mib", "rss_max_mb"},
	}
	for i, keys := range want {
		for _, k := range keys {
			if _, ok := got.Runs[i][k]; !ok {
				t.Errorf("run %d (%s): no key %q in %s", i, got.Runs[i]["scenario"], k, strings.Join(mapKeys(got.Runs[i]), ","))
			}
		}
	}
	if got.Runs[0]["scenario"] != "latency" || got.Runs[0]["mode"] != "notify" || got.Runs[0]["rate"] != 1000.0 {
		t.Errorf("run 0 = %v", got.Runs[0])
	}
	if got.Runs[2]["mode"] != "sql-ceiling" || got.Runs[3]["wakeups"] != true {
		t.Errorf("runs = %v", got.Runs)
	}
	// Keys of one scenario do not leak into another.
	if _, ok := got.Runs[1]["p50_ms"]; ok {
		t.Error("drain run has p50_ms")
	}
	if _, ok := got.Runs[0]["commits_per_s"]; ok {
		t.Error("latency run has commits_per_s")
	}
	if _, ok := got.Runs[4]["p50_ms"]; ok || got.Runs[4]["count"] != 5.0 {
		t.Errorf("broker-down run = %v", got.Runs[4])
	}
	if _, ok := got.Runs[1]["relay_rss_max_mib"]; ok {
		t.Error("in-process drain run has relay_rss_max_mib")
	}
}

func mapKeys(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

func TestFmtMS(t *testing.T) {
	for v, want := range map[float64]string{500: "500ms", 30000: "30s", 1000: "1s", 0.5: "0.5ms", 1500: "1500ms"} {
		if got := fmtMS(v); got != want {
			t.Errorf("fmtMS(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"mode", (&LatencyConfig{Mode: "x"}).validate(), "LatencyConfig.Mode"},
		{"rate", (&LatencyConfig{Mode: ModeFloor, Rate: -1}).validate(), "LatencyConfig.Rate"},
		{"no events", (&LatencyConfig{Mode: ModeFloor, Rate: 1, Duration: time.Millisecond}).validate(), "LatencyConfig.Duration"},
		{"poll", (&LatencyConfig{Mode: ModePoll, Relay: RelayConfig{PollInterval: time.Microsecond}}).validate(), "RelayConfig.PollInterval"},
		{"lease", (&DrainConfig{Mode: ModeNotify, Relay: RelayConfig{Lease: time.Millisecond}}).validate(), "RelayConfig.Lease"},
		{"drain mode", (&DrainConfig{Mode: "floor"}).validate(), "Mode"},
		{"relays", (&DrainConfig{Mode: ModeNotify, Relays: -1}).validate(), "DrainConfig.Relays"},
		{"connections", (&WritersConfig{Connections: -1}).validate(), "WritersConfig.Connections"},
		{"scenario", (&SuiteConfig{Scenarios: []string{"nope"}}).Validate(), "SuiteConfig.Scenarios"},
		{"large payloads", (&SuiteConfig{Scenarios: []string{ScenarioLargePayloads}, LargePayloads: DrainConfig{PayloadBytes: 2000000}}).Validate(), "SuiteConfig.LargePayloads.PayloadBytes"},
		{"env", (&Env{}).validate(), "Env.DSN"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to name %s", tc.name, tc.err, tc.want)
		}
	}
	c := LatencyConfig{Mode: ModeNotify}
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	if c.Rate != 1000 || c.Duration != 30*time.Second || c.Writers != 8 || c.EventsPerTx != 1 || c.Relay.PollInterval != 500*time.Millisecond {
		t.Errorf("defaults = %+v", c)
	}
}

// TestNotifyEveryTxMode: the simple design's mode runs a relay process
// with --claim-window off (with its other defaults, or the bench's
// settings) and writers in outbox.WakeupEveryTx, its baseline's writers
// too; notify-proc keeps the writer's debounced default and the relay's
// own claim window.
func TestNotifyEveryTxMode(t *testing.T) {
	for _, procDefaults := range []bool{true, false} {
		c := LatencyConfig{Mode: ModeNotifyEveryTx, Relay: RelayConfig{ProcDefaults: procDefaults, ClaimWindow: 40 * time.Millisecond}}
		if err := c.validate(); err != nil {
			t.Fatal(err)
		}
		if m, after := c.writerWakeup(); m != outbox.WakeupEveryTx || after || c.wakeupName() != "every-tx" || !c.wakeups() {
			t.Errorf("procDefaults %v: writers' wake-up %v (after-commit %v), name %q", procDefaults, m, after, c.wakeupName())
		}
		args := strings.Join(relayArgs([]string{"b:9092"}, "t", "ch", "127.0.0.1:1", c.Relay), " ")
		if c.Relay.ClaimWindow >= 0 || !strings.Contains(args, "--claim-window=-1ms") || strings.Contains(args, "--no-notify") {
			t.Errorf("procDefaults %v: claim window %s, relay args %s", procDefaults, c.Relay.ClaimWindow, args)
		}
		if strings.Contains(args, "--poll-interval") == procDefaults {
			t.Errorf("procDefaults %v: relay args %s", procDefaults, args)
		}
	}
	c := LatencyConfig{Mode: ModeNotifyProc, Relay: RelayConfig{ProcDefaults: true}}
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	args := strings.Join(relayArgs([]string{"b:9092"}, "t", "ch", "127.0.0.1:1", c.Relay), " ")
	if c.wakeupName() != "debounced" || strings.Contains(args, "--claim-window") {
		t.Errorf("notify-proc: writers %q, relay args %s", c.wakeupName(), args)
	}
	s := SuiteConfig{Scenarios: []string{ScenarioLatency}, Modes: []string{ModeNotifyProc, ModeNotifyEveryTx}, LatencyRounds: 3}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if !s.NeedsRelayBin(false) || !(&SuiteConfig{Scenarios: []string{ScenarioLatency}, Modes: []string{ModeNotifyEveryTx}}).NeedsRelayBin(false) {
		t.Error("notify-every-tx: no relay binary needed")
	}
	want := []string{ModeNotifyProc, ModeNotifyEveryTx, ModeNotifyEveryTx, ModeNotifyProc, ModeNotifyProc, ModeNotifyEveryTx}
	if got := roundModes(s.Modes, s.LatencyRounds); !slices.Equal(got, want) {
		t.Errorf("roundModes = %v, want %v", got, want)
	}
	if err := (&SuiteConfig{LatencyRounds: -1}).Validate(); err == nil || !strings.Contains(err.Error(), "LatencyRounds") {
		t.Errorf("LatencyRounds -1: %v", err)
	}
	if err := (&DrainConfig{Mode: ModeNotifyEveryTx}).validate(); err == nil {
		t.Error("drain accepts notify-every-tx")
	}
}
