package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestLatencyScenario runs the latency scenario briefly, at a low rate, in
// every mode against the test database and broker: all events arrive,
// none is lost, and the percentiles are ordered and plausible. It asserts
// no speed target.
func TestLatencyScenario(t *testing.T) {
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	env := &Env{DSN: db.ConnString, Brokers: k.Brokers, Log: testenv.Logger(t)}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep := &Report{Machine: DescribeMachine(ctx, db.ConnString)}
	for _, mode := range []string{ModeNotify, ModePoll, ModeNaive, ModeFloor} {
		began := time.Now()
		run, err := env.Latency(ctx, LatencyConfig{
			Mode:     mode,
			Rate:     200,
			Duration: time.Second,
			Writers:  4,
			Grace:    10 * time.Second,
			Relay:    RelayConfig{PollInterval: 100 * time.Millisecond},
			Warmup:   3,
		})
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		wall := time.Since(began)
		t.Logf("%s: count %d lost %d p50 %.2fms p99 %.2fms max %.2fms claims/s %.1f",
			mode, run.Count, run.Lost, run.P50MS, run.P99MS, run.MaxMS, run.ClaimsPerS)
		if run.Committed != 200 || run.Count != 200 || run.Lost != 0 || run.Errors != 0 {
			t.Errorf("%s: committed %d count %d lost %d errors %d, want 200 200 0 0", mode, run.Committed, run.Count, run.Lost, run.Errors)
		}
		if run.Duplicates != 0 {
			t.Errorf("%s: %d duplicates", mode, run.Duplicates)
		}
		if !(run.P50MS > 0 && run.P50MS <= run.P90MS && run.P90MS <= run.P99MS && run.P99MS <= run.MaxMS) {
			t.Errorf("%s: percentiles out of order: p50 %v p90 %v p99 %v max %v", mode, run.P50MS, run.P90MS, run.P99MS, run.MaxMS)
		}
		// No event can take longer than the whole run (a wrong unit would);
		// a fixed bound would be a speed target on a loaded machine.
		if run.MaxMS > float64(wall.Milliseconds()) {
			t.Errorf("%s: max %.0fms is longer than the run, %s", mode, run.MaxMS, wall.Round(time.Millisecond))
		}
		if mode != ModeFloor && run.ClaimsPerS <= 0 {
			t.Errorf("%s: no claims counted", mode)
		}
		if len(run.CDF) == 0 || run.CDF[len(run.CDF)-1].Fraction != 1 {
			t.Errorf("%s: CDF = %v", mode, run.CDF)
		}
		// The broker's floor, measured beside the writers: about 200
		// records in the second, fewer when a call takes over 5 ms (one
		// call at a time: how many depends on the machine's speed).
		if run.FloorRate != DefaultFloorProbeRate || run.FloorCount < 1 || run.FloorLost != 0 ||
			!(run.FloorP50MS > 0 && run.FloorP50MS <= run.FloorP99MS && run.FloorP99MS <= run.FloorMaxMS) {
			t.Errorf("%s: floor probe: rate %v count %d lost %d p50 %v p99 %v max %v", mode, run.FloorRate, run.FloorCount,
				run.FloorLost, run.FloorP50MS, run.FloorP99MS, run.FloorMaxMS)
		}
		rep.Runs = append(rep.Runs, run)
	}

	var out bytes.Buffer
	rep.WriteTable(&out)
	for _, want := range []string{"latency notify", "poll(100ms)", "naive(100ms)", "floor", "floor p50"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table has no %q:\n%s", want, out.String())
		}
	}
	dir := t.TempDir()
	for _, f := range []string{"r.json", "p.png", "p.svg"} {
		var err error
		if strings.HasSuffix(f, ".json") {
			err = rep.WriteJSON(filepath.Join(dir, f))
		} else {
			err = rep.WritePlot(filepath.Join(dir, f))
		}
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: not written (%v)", f, err)
		}
	}
}

// TestFloorProbeOff: a negative FloorProbeRate runs no probe and reports
// no floor.
func TestFloorProbeOff(t *testing.T) {
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	env := &Env{DSN: db.ConnString, Brokers: k.Brokers, Log: testenv.Logger(t)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run, err := env.Latency(ctx, LatencyConfig{Mode: ModeFloor, Rate: 100, Duration: 500 * time.Millisecond, Writers: 2, Warmup: 2, FloorProbeRate: -1})
	if err != nil {
		t.Fatal(err)
	}
	if run.Count != 50 || run.FloorCount != 0 || run.FloorRate != 0 {
		t.Errorf("count %d, floor count %d rate %v; want 50, no floor", run.Count, run.FloorCount, run.FloorRate)
	}
}
