package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/peterbourgon/ff/v3"

	"github.com/pgoutbox/outbox/bench"
)

// TestBrokerFlagsAreCheckedFirst: a bad --kafka, --kafka-cpus or
// --floor-probe-rate is a usage error (exit 2) naming the flag, before
// anything is started.
func TestBrokerFlagsAreCheckedFirst(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--kafka", "apache"}, "--kafka: "},
		{[]string{"--kafka", "4.4.0", "--brokers", "kafka:9092"}, "--kafka: "},
		{[]string{"--kafka-cpus", "1"}, "--kafka-cpus: "},
		{[]string{"--kafka", "4.4.0", "--kafka-cpus", "first"}, "--kafka-cpus: "},
		{[]string{"--floor-probe-rate", "20000"}, "--floor-probe-rate: "},
		{[]string{"--rate", "500,-1"}, "--rate: "},
	} {
		var stderr bytes.Buffer
		start := time.Now()
		code := Main(context.Background(), tc.args, io.Discard, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 naming %q", tc.args, code, stderr.String(), strings.TrimSuffix(tc.want, ": "))
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%v: took %s: something was started before the flags were checked", tc.args, d)
		}
	}
}

// TestFlagsMapOntoTheSuite: --rate takes a list (every mode runs at each
// rate), --floor-probe-rate 0 turns the probe off, --latency-rounds and
// mode notify-every-tx are accepted, and the environment
// (OUTBOX_KAFKA, OUTBOX_KAFKA_CPUS) sets the broker flags.
func TestFlagsMapOntoTheSuite(t *testing.T) {
	parse := func(args ...string) *options {
		t.Helper()
		fs := flag.NewFlagSet("outbox-bench", flag.ContinueOnError)
		var o options
		register(fs, &o)
		if err := ff.Parse(fs, args, ff.WithEnvVarPrefix("OUTBOX")); err != nil {
			t.Fatal(err)
		}
		return &o
	}
	o := parse()
	if o.kafka != bench.KafkaKfake || o.floorRate != bench.DefaultFloorProbeRate || !slices.Equal(o.suite.Rates, []float64{1000}) ||
		o.kafkaWarmup != bench.DefaultKafkaWarmup {
		t.Errorf("defaults: kafka %q floor %v rates %v warm-up %s", o.kafka, o.floorRate, o.suite.Rates, o.kafkaWarmup)
	}
	o = parse("--rate", "500,1000", "--floor-probe-rate", "0")
	o.derive()
	if !slices.Equal(o.suite.Rates, []float64{500, 1000}) || o.suite.Latency.Rate != 500 || o.suite.BrokerDown.Rate != 500 ||
		o.suite.Latency.FloorProbeRate >= 0 {
		t.Errorf("--rate 500,1000 --floor-probe-rate 0: rates %v, latency rate %v, broker-down rate %v, floor probe rate %v",
			o.suite.Rates, o.suite.Latency.Rate, o.suite.BrokerDown.Rate, o.suite.Latency.FloorProbeRate)
	}
	o = parse("--mode", "notify-proc,notify-every-tx", "--latency-rounds", "2")
	if err := o.suite.Validate(); err != nil || o.suite.LatencyRounds != 2 ||
		!slices.Equal(o.suite.Modes, []string{bench.ModeNotifyProc, bench.ModeNotifyEveryTx}) {
		t.Errorf("--mode notify-proc,notify-every-tx --latency-rounds 2: modes %v rounds %d err %v", o.suite.Modes, o.suite.LatencyRounds, err)
	}
	t.Setenv("OUTBOX_KAFKA", "4.4.0")
	t.Setenv("OUTBOX_KAFKA_CPUS", "1")
	if o = parse(); o.kafka != "4.4.0" || o.kafkaCPUs != "1" {
		t.Errorf("from the environment: kafka %q cpus %q", o.kafka, o.kafkaCPUs)
	}
}
