package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
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

// TestRelayBinFlags: mode notify-proc-b needs --relay-bin-b, and
// --relay-bin-b needs that mode; a --relay-bin or --relay-bin-b that does
// not exist, is a directory or is not executable is a usage error (exit
// 2) naming the flag, before anything is started. Two executables pass.
func TestRelayBinFlags(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	exe := filepath.Join(dir, "outbox-relay")
	if err := os.WriteFile(plain, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ab := []string{"--scenario", "latency", "--mode", "notify-proc,notify-proc-b"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{ab, "--relay-bin-b: required by --mode notify-proc-b"},
		{[]string{"--mode", "notify-proc-b"}, "--relay-bin-b: required"},
		{append(slices.Clone(ab), "--relay-bin-b", filepath.Join(dir, "missing")), "--relay-bin-b: " + filepath.Join(dir, "missing") + " does not exist"},
		{append(slices.Clone(ab), "--relay-bin-b", plain), "--relay-bin-b: " + plain + " is not executable"},
		{append(slices.Clone(ab), "--relay-bin-b", dir), "--relay-bin-b: " + dir + " is a directory"},
		{append(slices.Clone(ab), "--relay-bin-b", exe, "--relay-bin", plain), "--relay-bin: " + plain + " is not executable"},
		{[]string{"--mode", "notify-proc", "--relay-bin-b", exe}, "--relay-bin-b: only mode notify-proc-b runs it"},
	} {
		var stderr bytes.Buffer
		start := time.Now()
		code := Main(context.Background(), tc.args, io.Discard, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%v: took %s: something was started before the flags were checked", tc.args, d)
		}
	}
	fs := flag.NewFlagSet("outbox-bench", flag.ContinueOnError)
	var o options
	register(fs, &o)
	if err := ff.Parse(fs, append(slices.Clone(ab), "--relay-bin", exe, "--relay-bin-b", exe, "--latency-rounds", "3")); err != nil {
		t.Fatal(err)
	}
	o.derive()
	if err := o.suite.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := o.checkRelayBins(); err != nil || o.relayBinB != exe || !o.suite.NeedsRelayBinB() ||
		!slices.Equal(o.suite.Modes, []string{bench.ModeNotifyProc, bench.ModeNotifyProcB}) {
		t.Errorf("A/B flags: err %v, relay-bin-b %q, modes %v", err, o.relayBinB, o.suite.Modes)
	}
}
