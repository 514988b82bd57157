package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testenv"
)

// runningRelay is `outbox-relay run` in this process.
type runningRelay struct {
	stderr *testenv.SyncBuffer
	cancel context.CancelFunc
	done   chan int
	addr   string // metrics server, host:port
}

// startRun runs Main("run", args...) in a goroutine with JSON logs and
// waits until its metrics server listens (when --metrics-addr is given).
func startRun(t *testing.T, args ...string) *runningRelay {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningRelay{stderr: &testenv.SyncBuffer{}, cancel: cancel, done: make(chan int, 1)}
	go func() {
		r.done <- Main(ctx, append([]string{"run", "--log-format", "json"}, args...), io.Discard, r.stderr)
	}()
	t.Cleanup(func() { r.stop(t) })
	for i, a := range args {
		if a == "--metrics-addr" && strings.HasSuffix(args[i+1], ":0") {
			testenv.Eventually(t, 20*time.Second, func() bool {
				r.addr = logField(r.stderr.String(), "metrics server listening", "addr")
				return r.addr != ""
			}, "metrics server never listened:\n%s", r.stderr)
		}
	}
	return r
}

// stop cancels the run and returns its exit code (once; later calls
// return -1).
func (r *runningRelay) stop(t *testing.T) int {
	t.Helper()
	if r.cancel == nil {
		return -1
	}
	r.cancel()
	r.cancel = nil
	select {
	case code := <-r.done:
		return code
	case <-time.After(30 * time.Second):
		t.Errorf("run did not stop within 30s:\n%s", r.stderr)
		return -1
	}
}

// logField returns field of the first JSON log line whose msg is msg.
func logField(logs, msg, field string) string {
	sc := bufio.NewScanner(strings.NewReader(logs))
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == msg {
			if v, ok := m[field].(string); ok {
				return v
			}
		}
	}
	return ""
}

// scrape returns every sample of /metrics keyed by its series as printed.
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("bad sample %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

func getReadyz(t *testing.T, addr string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

func TestRunServesMetricsHealthAndReadiness(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	k := testenv.KafkaFake(t)
	topic, other := k.Topic(t, 2), k.Topic(t, 1)
	r := startRun(t, "--database-url", db.ConnString, "--brokers", strings.Join(k.Brokers, ","), "--topic", topic,
		"--channel", db.Schema, "--metrics-addr", "127.0.0.1:0", "--metrics-interval", "100ms",
		"--retention", "0", "--retention-interval", "100ms")

	resp, err := http.Get("http://" + r.addr + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	resp.Body.Close()
	testenv.Eventually(t, 20*time.Second, func() bool { code, _ := getReadyz(t, r.addr); return code == 200 }, "never ready:\n%s", r.stderr)

	w, err := outbox.NewWriter(outbox.WriterConfig{Channel: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	var evs []outbox.Event
	for i := range 5 {
		evs = append(evs, outbox.Event{AggregateID: fmt.Sprint("agg", i%2), Type: "t", Payload: json.RawMessage(`{}`)})
	}
	evs[4].Topic = other
	if err := w.Add(ctx, db.Pool, evs...); err != nil {
		t.Fatal(err)
	}
	// Published, marked, deleted by retention 0, gauges refreshed.
	var got map[string]float64
	testenv.Eventually(t, 20*time.Second, func() bool {
		got = scrape(t, r.addr)
		return got["outbox_relay_marked_total"] == 5 && got["outbox_retention_deleted_rows_total"] == 5 &&
			got["outbox_table_stats_last_success_timestamp_seconds"] > 0
	}, "metrics never showed 5 events marked and deleted: %v", &got)
	// A refresh begun after the deletes, so the gauges are current. The
	// first to finish after this scrape may have begun before the marks;
	// refreshes run one at a time, so the one after it began after them.
	for range 2 {
		before := got["outbox_table_stats_last_success_timestamp_seconds"]
		testenv.Eventually(t, 10*time.Second, func() bool {
			got = scrape(t, r.addr)
			return got["outbox_table_stats_last_success_timestamp_seconds"] > before
		}, "table gauges not refreshed")
	}
	for series, v := range map[string]float64{
		"outbox_relay_up":                                        1,
		"outbox_relay_marked_total":                              5,
		"outbox_relay_publish_failures_total":                    0,
		"outbox_relay_dead_lettered_total":                       0,
		"outbox_published_events_total{topic=\"" + topic + "\"}": 4,
		"outbox_published_events_total{topic=\"" + other + "\"}": 1,
		"outbox_publish_latency_seconds_count":                   5,
		"outbox_publish_latency_seconds_bucket{le=\"+Inf\"}":     5,
		"outbox_unpublished_events":                              0,
		"outbox_dead_letter_events":                              0,
		"outbox_oldest_unpublished_age_seconds":                  0,
		"outbox_listener_connected":                              1,
		"outbox_retention_deleted_rows_total":                    5,
		"outbox_retention_errors_total":                          0,
		"outbox_table_stats_errors_total":                        0,
	} {
		if got[series] != v {
			t.Errorf("%s = %v, want %v", series, got[series], v)
		}
	}
	// Claim, batch and mark instrumentation: every event came through a
	// claim that found rows and was marked; nothing was taken over or lost.
	if got["outbox_claim_batch_size_sum"] != 5 || got["outbox_claim_duration_seconds_count{result=\"rows\"}"] < 1 ||
		got["outbox_mark_duration_seconds_count"] < 1 || got["outbox_lease_takeovers_total"] != 0 || got["outbox_lease_lost_total"] != 0 {
		t.Errorf("batch sizes sum %v, claims with rows %v, marks %v, takeovers %v, lease lost %v",
			got["outbox_claim_batch_size_sum"], got["outbox_claim_duration_seconds_count{result=\"rows\"}"],
			got["outbox_mark_duration_seconds_count"], got["outbox_lease_takeovers_total"], got["outbox_lease_lost_total"])
	}
	if got["outbox_relay_claims_total"] < 1 || got["outbox_listener_reconnects_total"] < 1 || got["outbox_notifications_received_total"] < 1 {
		t.Errorf("claims %v, reconnects %v, notifications %v: want each >= 1", got["outbox_relay_claims_total"],
			got["outbox_listener_reconnects_total"], got["outbox_notifications_received_total"])
	}
	if sum := got["outbox_publish_latency_seconds_sum"]; sum <= 0 || sum > 5*20 {
		t.Errorf("latency sum %v", sum)
	}
	var left int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM outbox").Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d rows left with --retention 0 (%v)", left, err)
	}

	// The broker goes away: not ready, naming the broker.
	k.Cluster.Close()
	var body map[string]any
	testenv.Eventually(t, 10*time.Second, func() bool {
		var code int
		code, body = getReadyz(t, r.addr)
		return code == 503
	}, "still ready with the broker down")
	if failed := fmt.Sprint(body["failed"]); failed != "[broker]" {
		t.Fatalf("failed %s, want [broker]: %v", failed, body)
	}
	// An event written now fails to publish, counted by topic and reason.
	if err := w.Add(ctx, db.Pool, outbox.Event{AggregateID: "x", Type: "t", Payload: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	unreachable := func(m map[string]float64) float64 {
		for series, v := range m {
			if strings.HasPrefix(series, "outbox_publish_errors_total{") && strings.Contains(series, `reason="unreachable"`) &&
				strings.Contains(series, `topic="`+topic+`"`) && strings.Contains(series, `dead_lettered="false"`) {
				return v
			}
		}
		return 0
	}
	testenv.Eventually(t, 20*time.Second, func() bool { got = scrape(t, r.addr); return unreachable(got) >= 1 },
		"no publish error counted with reason unreachable for topic %s", topic)

	if code := r.stop(t); code != 0 {
		t.Fatalf("exit %d:\n%s", code, r.stderr)
	}
	// The server is shut down with the relay.
	if _, err := net.DialTimeout("tcp", r.addr, time.Second); err == nil {
		t.Fatal("metrics server still listening after run returned")
	}
}

func TestRunPollOnlyIsReadyWithoutListener(t *testing.T) {
	t.Parallel()
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	r := startRun(t, "--database-url", db.ConnString, "--brokers", strings.Join(k.Brokers, ","), "--topic", k.Topic(t, 1),
		"--no-notify", "--metrics-addr", "127.0.0.1:0", "--retention", "-1s")
	var body map[string]any
	testenv.Eventually(t, 20*time.Second, func() bool {
		var code int
		code, body = getReadyz(t, r.addr)
		return code == 200
	}, "never ready: %v", body)
	if c := fmt.Sprint(body["checks"]); !strings.Contains(c, "poll-only") {
		t.Fatalf("checks %s do not say poll-only", c)
	}
	got := scrape(t, r.addr)
	if _, ok := got["outbox_listener_connected"]; ok {
		t.Error("poll-only run exports outbox_listener_connected")
	}
	if _, ok := got["outbox_retention_deleted_rows_total"]; ok {
		t.Error("--retention negative still runs the cleaner")
	}
	if !strings.Contains(r.stderr.String(), "retention off") {
		t.Error("no log that retention is off")
	}
}

// TestMetricsAddrInUseExitsTwo: a relay whose --metrics-addr is taken
// (another relay on the same host, say) refuses to start, naming the flag
// and the address, instead of running on without health endpoints.
func TestMetricsAddrInUseExitsTwo(t *testing.T) {
	t.Parallel()
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	// Before the fix the relay ran on; the deadline ends it then.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code, _, stderr := runMain(t, ctx, "run", "--database-url", db.ConnString, "--brokers", strings.Join(k.Brokers, ","), "--topic", "t",
		"--channel", db.Schema, "--metrics-addr", addr)
	if ctx.Err() != nil || code != exitUsage || !strings.Contains(stderr, "--metrics-addr "+addr+": address already in use") ||
		!strings.Contains(stderr, "--metrics-addr ''") {
		t.Fatalf("exit %d (deadline passed: %v), stderr:\n%s\nwant exit 2 at once naming --metrics-addr %s and how to turn the server off", code, ctx.Err() != nil, stderr, addr)
	}
}

// TestMetricsAddrEmptyRunsWithoutServer: an empty --metrics-addr turns the
// server off on purpose, and the relay says so.
func TestMetricsAddrEmptyRunsWithoutServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	topic := k.Topic(t, 1)
	r := startRun(t, "--database-url", db.ConnString, "--brokers", strings.Join(k.Brokers, ","), "--topic", topic,
		"--channel", db.Schema, "--metrics-addr", "")
	if err := outbox.Add(ctx, db.Pool, outbox.Event{AggregateID: "a", Type: "t", Payload: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	if recs := k.Consume(t, topic, 1, 20*time.Second); len(recs) != 1 {
		t.Fatalf("published %d of 1", len(recs))
	}
	if code := r.stop(t); code != 0 {
		t.Fatalf("exit %d:\n%s", code, r.stderr)
	}
	if !strings.Contains(r.stderr.String(), "metrics server off") {
		t.Errorf("no log that the metrics server is off:\n%s", r.stderr)
	}
	_, stdout, stderr := runMain(t, ctx, "run", "--help")
	if !strings.Contains(stdout+stderr, "--metrics-addr '' turns it off") {
		t.Errorf("run --help does not document --metrics-addr ''")
	}
}

func TestObserveFlagsAreValidated(t *testing.T) {
	t.Parallel()
	valid := []string{"run", "--database-url", "postgres://u@127.0.0.1:1/db", "--brokers", "127.0.0.1:1", "--topic", "t"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--metrics-interval", "1ms"}, "--metrics-interval"},
		{[]string{"--retention-batch", "0"}, "--retention-batch"},
		{[]string{"--retention-batch", "1000000"}, "--retention-batch"},
		{[]string{"--retention-interval", "1ms"}, "--retention-interval"},
		{[]string{"--retention-interval", "-1s"}, "--retention-interval"},
	} {
		code, _, stderr := runMain(t, context.Background(), append(append([]string{}, valid...), tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 naming %s", tc.args, code, stderr, tc.want)
		}
	}
	code, stdout, _ := runMain(t, context.Background(), "run", "--help")
	for _, w := range []string{"--metrics-addr", "(default :9090)", "--retention ", "(default 168h0m0s)", "--retention-batch", "--retention-interval", "--metrics-interval"} {
		if code != 0 || !strings.Contains(stdout, w) {
			t.Errorf("run --help lacks %q", w)
		}
	}
}
