package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/pgoutbox/outbox/internal/faultnet"
	"github.com/pgoutbox/outbox/internal/testenv"
)

// TestRelayProcess builds cmd/outbox-relay and runs it as a child process:
// a drain of a few thousand events (notify-proc) and a broker-down run
// with a 2s outage. Every event arrives and the relay's RSS was sampled.
// It asserts no speed or memory target.
func TestRelayProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/outbox-relay")
	}
	db := testenv.MigratedDB(t)
	ln, err := faultnet.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	k := testenv.KafkaFake(t, kfake.ListenFn(func(network, addr string) (net.Listener, error) { return ln, nil }))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bin, err := BuildRelay(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	env := &Env{DSN: db.ConnString, Brokers: k.Brokers, Log: testenv.Logger(t), RelayBin: bin}
	if k.Cluster != nil {
		env.SetBrokerUp = func(_ context.Context, up bool) error {
			if up {
				ln.SetMode(faultnet.Up)
			} else {
				ln.SetMode(faultnet.Refuse)
			}
			return nil
		}
	}
	rep := &Report{}

	const events = 3000
	run, err := env.Drain(ctx, DrainConfig{Mode: ModeNotifyProc, Events: events, PreloadBatch: 1000, Timeout: time.Minute})
	if err != nil {
		t.Fatalf("drain notify-proc: %v", err)
	}
	t.Logf("drain notify-proc: %.0f events/s, relay RSS max %.1f MiB, VmHWM %.1f MiB, start %.3fs",
		run.EventsPerS, run.RelayRSSMaxMiB, run.RelayVmHWMMiB, run.RelayStartS)
	if run.Received != events {
		t.Errorf("drain: received %d of %d", run.Received, events)
	}
	if run.RelayRSSMaxMiB <= 0 || run.RelayVmHWMMiB <= 0 {
		t.Errorf("drain: relay RSS %v, VmHWM %v: not sampled", run.RelayRSSMaxMiB, run.RelayVmHWMMiB)
	}
	rep.Runs = append(rep.Runs, run)

	if env.SetBrokerUp == nil {
		t.Log("external brokers: broker-down not run")
	} else {
		run, err = env.BrokerDown(ctx, BrokerDownConfig{Rate: 200, Writers: 4, Before: time.Second, Outage: 2 * time.Second, RecoveryTimeout: 90 * time.Second})
		if err != nil {
			t.Fatalf("broker-down: %v", err)
		}
		b := run.BrokerDown
		t.Logf("broker-down: count %d written in outage %d lost %d dup %d recovery %.2fs RSS before %.1f outage %.1f recovery %.1f MiB",
			b.Count, b.WrittenOutage, b.Lost, b.Duplicates, b.RecoveryS, b.RSSBeforeMiB, b.RSSMaxOutageMiB, b.RSSMaxRecoveryMiB)
		if b.Lost != 0 || b.Count == 0 || b.Received != b.Count {
			t.Errorf("broker-down: count %d received %d lost %d", b.Count, b.Received, b.Lost)
		}
		if b.WrittenOutage <= 0 {
			t.Errorf("broker-down: no event written during the outage")
		}
		if b.RSSBeforeMiB <= 0 || b.RSSMaxOutageMiB <= 0 || b.RSSMaxRecoveryMiB <= 0 {
			t.Errorf("broker-down: RSS not sampled: %+v", b)
		}
		if b.RecoveryS <= 0 {
			t.Errorf("broker-down: recovery %v", b.RecoveryS)
		}
		rep.Runs = append(rep.Runs, run)
	}

	var out bytes.Buffer
	rep.WriteTable(&out)
	for _, want := range []string{"notify-proc x1", "relay RSS max MiB"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table has no %q:\n%s", want, out.String())
		}
	}
	if env.SetBrokerUp != nil && !strings.Contains(out.String(), "broker-down") {
		t.Errorf("table has no broker-down:\n%s", out.String())
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Runs []map[string]any `json:"runs"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Runs[0]["relay_rss_max_mib"]; !ok {
		t.Errorf("drain run has no relay_rss_max_mib: %v", got.Runs[0])
	}
	t.Logf("\n%s", out.String())
}

// TestRelayProcessCost runs the relay as a process (its own defaults) in a
// short latency run, a small burst run and a small backlog drain, and
// checks the figures that only a relay process gives: its CPU time, its
// claims (scraped from its /metrics), the idle cost, the burst rates and
// their ratio. It asserts no speed target.
func TestRelayProcessCost(t *testing.T) {
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
	rep := &Report{Machine: DescribeMachine(ctx, db.ConnString)}
	cpuVisible := !strings.HasPrefix(rep.Machine.DBCPUSource, "unavailable")

	run, err := env.Latency(ctx, LatencyConfig{Mode: ModeNotifyProc, Rate: 200, Duration: time.Second, Writers: 4, Warmup: 3,
		IdleWindow: 500 * time.Millisecond, Relay: RelayConfig{ProcDefaults: true}})
	if err != nil {
		t.Fatalf("latency notify-proc: %v", err)
	}
	c := run.Cost
	if run.Count != 200 || run.Lost != 0 || c == nil {
		t.Fatalf("latency notify-proc: count %d lost %d cost %+v", run.Count, run.Lost, c)
	}
	t.Logf("latency notify-proc: p50 %.2fms claims/s %.1f idle claims/s %.1f; relay CPU %v s, DB CPU %v s, %d xacts, %d WAL bytes",
		run.P50MS, run.ClaimsPerS, run.IdleClaimsPerS, optF(c.RelayCPUS, "%.3f"), optF(c.DBCPUS, "%.3f"), c.DBXacts, c.WALBytes)
	if c.RelayCPUS == nil || *c.RelayCPUS <= 0 || c.RelayCPUMSPerEvent == nil {
		t.Errorf("relay CPU not measured: %v", c.RelayCPUS)
	}
	if cpuVisible && (c.DBCPUS == nil || *c.DBCPUS <= 0) {
		t.Errorf("DB CPU not measured: %v", c.DBCPUS)
	}
	if run.ClaimsPerS <= 0 || run.WakeNotify <= 0 {
		t.Errorf("relay counters not scraped: claims/s %v, notify wake-ups %d", run.ClaimsPerS, run.WakeNotify)
	}
	// The writers' 200 transactions, the relay's claims and marks.
	if c.DBXacts < 200 || c.WALBytes <= 0 || c.CostEvents != 200 || !run.RelayDefaults {
		t.Errorf("xacts %d, WAL %d, events %d, relay defaults %v", c.DBXacts, c.WALBytes, c.CostEvents, run.RelayDefaults)
	}
	rep.Runs = append(rep.Runs, run)

	run, err = env.Burst(ctx, BurstConfig{Events: 3000, Idle: 3 * time.Second, IdleSettle: time.Second, ShortIdle: 200 * time.Millisecond,
		Relay: RelayConfig{ProcDefaults: true}})
	if err != nil {
		t.Fatalf("burst: %v", err)
	}
	b := run.Burst
	t.Logf("burst: idle %.2f xacts/s, relay %v CPU-s/10s, DB %v CPU-s/10s, %.1f claims/s; %.0f events/s after %gs idle, %.0f after %gs; ratio %.2f; insert %.3fs",
		b.IdleDBXactsPerS, optF(b.IdleRelayCPUSPer10S, "%.4f"), optF(b.IdleDBCPUSPer10S, "%.4f"), b.IdleCostClaimsPerS,
		b.AfterIdleEventsPerS, b.IdleS, b.AfterShortIdleEventsPerS, b.ShortIdleS, b.BurstRatio, b.InsertS)
	if b.BurstReceived != 6000 || b.AfterIdleEventsPerS <= 0 || b.AfterShortIdleEventsPerS <= 0 || b.BurstRatio <= 0 {
		t.Errorf("burst: received %d of 6000, rates %v %v ratio %v", b.BurstReceived, b.AfterIdleEventsPerS, b.AfterShortIdleEventsPerS, b.BurstRatio)
	}
	if b.IdleCostWindowS < 1.5 || b.IdleRelayCPUSPer10S == nil || b.IdleCostClaimsPerS <= 0 {
		t.Errorf("idle cost: window %vs, relay CPU %v, claims/s %v", b.IdleCostWindowS, b.IdleRelayCPUSPer10S, b.IdleCostClaimsPerS)
	}
	if cpuVisible && b.IdleDBCPUSPer10S == nil {
		t.Error("idle DB CPU not measured")
	}
	if run.Cost == nil || run.Cost.CostEvents != 6000 || run.RelayXactsPerEvent == nil || *run.RelayXactsPerEvent <= 0 {
		t.Errorf("burst cost: %+v", run.Cost)
	}
	rep.Runs = append(rep.Runs, run)

	run, err = env.Drain(ctx, DrainConfig{Scenario: ScenarioBacklog, Mode: ModeNotifyProc, Events: 5000, SQLPreload: true, PreloadBatch: 2000,
		Timeout: time.Minute, Relay: RelayConfig{ProcDefaults: true}})
	if err != nil {
		t.Fatalf("backlog: %v", err)
	}
	t.Logf("backlog: %.0f events/s, claims %d, relay CPU %v s, relay xacts/event %v", run.EventsPerS, run.Claims,
		optF(run.RelayCPUS, "%.3f"), optF(run.RelayXactsPerEvent, "%.3f"))
	if run.Received != 5000 || run.EventsPerS <= 0 || run.Claims <= 0 || run.Cost == nil || run.RelayCPUS == nil || run.RelayXactsPerEvent == nil {
		t.Errorf("backlog: received %d events/s %v claims %d cost %+v", run.Received, run.EventsPerS, run.Claims, run.Cost)
	}
	rep.Runs = append(rep.Runs, run)
	rep.Goals = EvaluateGoals(rep.Runs)

	var out bytes.Buffer
	rep.WriteTable(&out)
	for _, want := range []string{"idle cost", "burst (one transaction)", "backlog notify-proc x1", "latency notify-proc 200/s", "relay CPU ms/ev", "backlog drain"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table has no %q:\n%s", want, out.String())
		}
	}
	t.Logf("\n%s", out.String())
}
