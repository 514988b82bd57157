package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/kafkatemp"
	"github.com/pgoutbox/outbox/internal/testenv"
)

// TestLocalRealBroker starts the bench's real broker (StartLocal with
// Kafka 4.4.0: production JVM flags, a short warm-up) against the test
// database and runs what a real broker adds: a notify-proc latency run
// reports the broker's floor and its CPU time per event next to the
// relay's, and a broker-down run SIGKILLs the broker, restarts it and
// loses nothing. It asserts no speed target.
func TestLocalRealBroker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a JVM broker and builds cmd/outbox-relay")
	}
	testenv.RequireKafkaTools(t)
	db := testenv.MigratedDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	local, err := StartLocal(ctx, LocalConfig{DSN: db.ConnString, Kafka: kafkatemp.V44, KafkaWarmup: time.Second, KafkaHeapMB: 512, Log: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := local.Close(); err != nil {
			t.Error(err)
		}
		if local.BrokerPID() != 0 {
			t.Error("the broker runs after Close")
		}
	})
	pid := local.BrokerPID()
	flags := strings.Join(local.BrokerJVMFlags(), " ")
	if local.Broker() != "Apache Kafka 4.4.0" || local.Kfake() || pid <= 0 || !local.CanTakeBrokerDown() ||
		!strings.Contains(flags, "-XX:+UseG1GC") || strings.Contains(flags, "TieredStopAtLevel") {
		t.Fatalf("broker %q kfake %v pid %d control %v flags %s", local.Broker(), local.Kfake(), pid, local.CanTakeBrokerDown(), flags)
	}
	if !strings.Contains(local.Warmup, "records acknowledged") {
		t.Errorf("warm-up: %q", local.Warmup)
	}
	bin, err := BuildRelay(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	env := &Env{DSN: local.DSN, Brokers: local.Brokers, Partitions: 3, Log: testenv.Logger(t), RelayBin: bin,
		Broker: local.Broker(), BrokerOutage: local.BrokerOutage(), SetBrokerUp: local.SetBrokerUp, BrokerPID: local.BrokerPID}

	run, err := env.Latency(ctx, LatencyConfig{Mode: ModeNotifyProc, Rate: 200, Duration: 2 * time.Second, Writers: 4, Warmup: 3,
		Aggregates: 50, Relay: RelayConfig{ProcDefaults: true}})
	if err != nil {
		t.Fatalf("latency: %v", err)
	}
	c := run.Cost
	t.Logf("latency notify-proc: p50 %.2f ms p99 %.2f ms; floor p50 %.2f ms p99 %.2f ms (%d); relay CPU %s ms/ev, broker CPU %s ms/ev",
		run.P50MS, run.P99MS, run.FloorP50MS, run.FloorP99MS, run.FloorCount, optF(c.RelayCPUMSPerEvent, "%.3f"), optF(c.BrokerCPUMSPerEvent, "%.3f"))
	// The floor probe makes one call at a time: how many records it
	// measured depends on the broker's speed, not whether it ran.
	if run.Count != 400 || run.Lost != 0 || run.FloorCount < 1 || run.FloorLost != 0 {
		t.Errorf("count %d lost %d, floor count %d lost %d", run.Count, run.Lost, run.FloorCount, run.FloorLost)
	}
	if c == nil || c.BrokerCPUS == nil || *c.BrokerCPUS <= 0 || c.BrokerCPUMSPerEvent == nil || c.RelayCPUMSPerEvent == nil {
		t.Errorf("broker or relay CPU not measured: %+v", c)
	}
	if rt := run.RelayTimings; rt == nil || rt.Claims <= 0 || rt.Produces <= 0 || rt.Marks <= 0 || rt.ProduceMeanMS <= 0 {
		t.Errorf("relay timings not scraped: %+v", rt)
	}

	bd, err := env.BrokerDown(ctx, BrokerDownConfig{Rate: 100, Writers: 2, Before: time.Second, Outage: 2 * time.Second,
		Aggregates: 50, RecoveryTimeout: 2 * time.Minute})
	if err != nil {
		t.Fatalf("broker-down: %v", err)
	}
	b := bd.BrokerDown
	t.Logf("broker-down: %s, restart %.1fs, recovery %.2fs, count %d written in outage %d lost %d dup %d",
		b.Outage, b.RestartS, b.RecoveryS, b.Count, b.WrittenOutage, b.Lost, b.Duplicates)
	if b.Outage != OutageKilled || b.RestartS <= 0 || b.Lost != 0 || b.Received != b.Count || b.WrittenOutage <= 0 {
		t.Errorf("broker-down: %+v", b)
	}
	if np := local.BrokerPID(); np <= 0 || np == pid {
		t.Errorf("broker PID %d after the restart, %d before: not a new process", np, pid)
	}

	rep := &Report{Machine: Machine{Broker: local.Broker(), BrokerJVMFlags: local.BrokerJVMFlags(), BrokerWarmup: local.Warmup}, Runs: []Run{run, bd}}
	var out bytes.Buffer
	rep.WriteTable(&out)
	for _, want := range []string{"broker: Apache Kafka 4.4.0", "broker JVM (not pinned): -Xmx512m", "broker CPU ms/ev", "floor p50", "relay process (its /metrics)", "sigkill"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table has no %q:\n%s", want, out.String())
		}
	}
	j, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"broker_cpu_ms_per_event":`, `"floor_p50_ms":`, `"floor_p99_ms":`, `"floor_max_ms":`, `"floor_count":`, `"broker_jvm_flags":`, `"restart_s":`} {
		if !bytes.Contains(j, []byte(key)) {
			t.Errorf("JSON has no %s", key)
		}
	}
}

func TestLocalConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  LocalConfig
		want string
	}{
		{LocalConfig{Kafka: "kafka"}, "LocalConfig.Kafka"},
		{LocalConfig{Kafka: "4."}, "LocalConfig.Kafka"},
		{LocalConfig{Kafka: "4.4.0", Brokers: []string{"k:9092"}}, "LocalConfig.Kafka"},
		{LocalConfig{KafkaCPUs: "1"}, "LocalConfig.KafkaCPUs"},
		{LocalConfig{Kafka: "4.4.0", KafkaCPUs: "one"}, "LocalConfig.KafkaCPUs"},
		{LocalConfig{Kafka: "4.4.0", KafkaHeapMB: -1}, "LocalConfig.KafkaHeapMB"},
	} {
		if err := tc.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
	for _, ok := range []LocalConfig{{}, {Kafka: "3.9.1", KafkaCPUs: "0,1-1"}, {Brokers: []string{"k:9092"}}} {
		if err := ok.Validate(); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
	if c := (LocalConfig{}).WithDefaults(); c.Kafka != KafkaKfake || c.KafkaWarmup != DefaultKafkaWarmup || c.KafkaHeapMB != DefaultKafkaHeapMB || c.Log == nil {
		t.Errorf("WithDefaults: %+v", c)
	}
}
