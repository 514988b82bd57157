package bench

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// TestNotifyProcBMode: notify-proc-b is notify-proc with another binary:
// the same relay arguments (with its defaults and with the bench's
// settings), the same writers' wake-ups, a relay process; it is a latency
// and a drain mode, and without Env.RelayBinB it does not start.
func TestNotifyProcBMode(t *testing.T) {
	for _, procDefaults := range []bool{true, false} {
		a := LatencyConfig{Mode: ModeNotifyProc, Relay: RelayConfig{ProcDefaults: procDefaults}}
		b := LatencyConfig{Mode: ModeNotifyProcB, Relay: RelayConfig{ProcDefaults: procDefaults}}
		if err := a.validate(); err != nil {
			t.Fatal(err)
		}
		if err := b.validate(); err != nil {
			t.Fatal(err)
		}
		argsA := relayArgs([]string{"b:9092"}, "t", "ch", "127.0.0.1:1", a.Relay)
		argsB := relayArgs([]string{"b:9092"}, "t", "ch", "127.0.0.1:1", b.Relay)
		if !slices.Equal(argsA, argsB) {
			t.Errorf("procDefaults %v: relay args\nA %v\nB %v", procDefaults, argsA, argsB)
		}
		if a.wakeupName() != b.wakeupName() || !b.wakeups() || !b.hasRelay() || !procMode(b.Mode) {
			t.Errorf("procDefaults %v: writers A %q B %q", procDefaults, a.wakeupName(), b.wakeupName())
		}
	}
	d := DrainConfig{Mode: ModeNotifyProcB}
	if err := d.validate(); err != nil || d.Relay.Mode != ModeNotifyProcB {
		t.Errorf("drain notify-proc-b: relay mode %q, err %v", d.Relay.Mode, err)
	}
	s := SuiteConfig{Scenarios: []string{ScenarioLatency}, Modes: []string{ModeNotifyProc, ModeNotifyProcB}, LatencyRounds: 3}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if !s.NeedsRelayBinB() || (&SuiteConfig{Scenarios: []string{ScenarioLatency}, Modes: []string{ModeNotifyProc}}).NeedsRelayBinB() ||
		(&SuiteConfig{Scenarios: []string{ScenarioWriters}, Modes: []string{ModeNotifyProcB}}).NeedsRelayBinB() {
		t.Error("NeedsRelayBinB")
	}
	want := []string{ModeNotifyProc, ModeNotifyProcB, ModeNotifyProcB, ModeNotifyProc, ModeNotifyProc, ModeNotifyProcB}
	if got := roundModes(s.Modes, s.LatencyRounds); !slices.Equal(got, want) {
		t.Errorf("roundModes = %v, want %v", got, want)
	}
	e := &Env{RelayBin: "/bin/true"}
	if _, err := e.startRelayProc(nil, "t", "ch", RelayConfig{Mode: ModeNotifyProcB}, zap.NewNop()); err == nil || !strings.Contains(err.Error(), "RelayBinB") {
		t.Errorf("notify-proc-b without Env.RelayBinB: %v", err)
	}
}

// TestCheckRelayBin: a missing file, a directory and a file without an x
// bit are refused, each saying why; an executable file is accepted.
func TestCheckRelayBin(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	exe := filepath.Join(dir, "exe")
	if err := os.WriteFile(plain, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, []byte("#!/bin/sh\necho outbox-relay v0.0.0-test\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{"", "empty"},
		{filepath.Join(dir, "missing"), "does not exist"},
		{dir, "directory"},
		{plain, "not executable"},
	} {
		if err := CheckRelayBin(tc.path); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckRelayBin(%q) = %v, want %q", tc.path, err, tc.want)
		}
	}
	if err := CheckRelayBin(exe); err != nil {
		t.Errorf("CheckRelayBin(executable) = %v", err)
	}
	b := DescribeRelayBin(context.Background(), exe)
	if b.Path != exe || b.Version != "outbox-relay v0.0.0-test" || len(b.SHA256) != 64 {
		t.Errorf("DescribeRelayBin = %+v", b)
	}
}

// TestCompareAB: medians and ranges per binary and rate, the verdict
// against the larger range, failed runs and other modes left out.
func TestCompareAB(t *testing.T) {
	run := func(mode string, rate, p50 float64, relayCPU float64) Run {
		c := relayCPU
		return Run{Scenario: ScenarioLatency, Mode: mode, Latency: &Latency{Rate: rate, Count: 100, P50MS: p50, P99MS: 5}, Cost: &Cost{RelayCPUMSPerEvent: &c}}
	}
	runs := []Run{
		run(ModeNotifyProc, 1000, 1.0, 0.10), run(ModeNotifyProcB, 1000, 2.0, 0.10),
		run(ModeNotifyProcB, 1000, 2.2, 0.11), run(ModeNotifyProc, 1000, 1.2, 0.12),
		run(ModeNotifyProc, 1000, 1.1, 0.11), run(ModeNotifyProcB, 1000, 2.1, 0.12),
		run(ModeNotify, 1000, 9, 0), run(ModeNotifyProc, 10, 3, 0.5), run(ModeNotifyProcB, 10, 3.5, 0.5),
	}
	failed := run(ModeNotifyProc, 1000, 50, 9)
	failed.Error = "boom"
	runs = append(runs, failed)
	rows := CompareAB(runs)
	get := func(rate float64, fig string) ABRow {
		for _, r := range rows {
			if r.Rate == rate && r.Figure == fig {
				return r
			}
		}
		t.Fatalf("no row %g %s in %+v", rate, fig, rows)
		return ABRow{}
	}
	near := func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
	p50 := get(1000, "p50_ms")
	if p50.RunsA != 3 || p50.RunsB != 3 || !near(p50.MedianA, 1.1) || !near(p50.MedianB, 2.1) || !near(p50.Spread, 0.2) || p50.Verdict != "B worse" {
		t.Errorf("p50 at 1000/s: %+v", p50)
	}
	if cpu := get(1000, "relay_cpu_ms_per_event"); !near(cpu.Diff, 0) || cpu.Verdict != "within spread" {
		t.Errorf("relay CPU at 1000/s: %+v", cpu)
	}
	if one := get(10, "p50_ms"); one.Verdict != "-" || !near(one.Diff, -0.5) {
		t.Errorf("one run each at 10/s: %+v", one)
	}
	for _, r := range rows {
		if r.Figure == "relay_db_cpu_ms_per_event" {
			t.Errorf("a figure no run has: %+v", r)
		}
	}
	if rows := CompareAB(runs[:1]); rows != nil {
		t.Errorf("A only: %+v", rows)
	}
	var buf strings.Builder
	writeAB(&buf, CompareAB(runs))
	if !strings.Contains(buf.String(), "B worse") || !strings.Contains(buf.String(), "notify-proc-b") {
		t.Errorf("table:\n%s", buf.String())
	}
}
