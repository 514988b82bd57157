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
	k := testenv.Kafka(t, kfake.ListenFn(func(network, addr string) (net.Listener, error) { return ln, nil }))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bin, err := BuildRelay(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	env := &Env{DSN: db.ConnString, Brokers: k.Brokers, Log: testenv.Logger(t), RelayBin: bin}
	if k.Cluster != nil {
		env.SetBrokerUp = func(up bool) {
			if up {
				ln.SetMode(faultnet.Up)
			} else {
				ln.SetMode(faultnet.Refuse)
			}
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
