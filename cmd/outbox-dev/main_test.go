package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgoutbox/outbox/internal/pgtemp"
	"github.com/pgoutbox/outbox/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var publishedLine = regexp.MustCompile(`(?m)^published (payment\.(?:authorized|captured)) (pay_\d{6}) event_id=([0-9a-f-]{36}) (\S+) from COMMIT to Kafka's ack$`)

// devRun is run running in the background: its output, its cancel
// function, and done, closed with err set when run returned.
type devRun struct {
	stdout, stderr testenv.SyncBuffer
	cancel         context.CancelFunc
	done           chan struct{}
	err            error
}

// startDev starts run with args; cleanup cancels it and waits for it.
func startDev(t *testing.T, args ...string) *devRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d := &devRun{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(d.done)
		d.err = run(ctx, args, &d.stdout, &d.stderr)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-d.done:
		case <-time.After(60 * time.Second):
			t.Errorf("run did not return within 60s of cancel")
		}
		if t.Failed() {
			t.Logf("stdout:\n%s\nstderr:\n%s", d.stdout.String(), d.stderr.String())
		}
	})
	return d
}

// waitPublished waits until stdout has at least n latency lines.
func (d *devRun) waitPublished(t *testing.T, n int) [][]string {
	t.Helper()
	var lines [][]string
	testenv.Eventually(t, 90*time.Second, func() bool {
		select {
		case <-d.done:
			t.Fatalf("run returned early: %v\nstdout:\n%s\nstderr:\n%s", d.err, d.stdout.String(), d.stderr.String())
		default:
		}
		lines = publishedLine.FindAllStringSubmatch(d.stdout.String(), -1)
		return len(lines) >= n
	}, "%d published lines in stdout", n)
	return lines
}

// stop cancels run and returns its error, failing t if it hangs.
func (d *devRun) stop(t *testing.T) error {
	t.Helper()
	d.cancel()
	select {
	case <-d.done:
		return d.err
	case <-time.After(60 * time.Second):
		t.Fatalf("run did not return within 60s of cancel")
		return nil
	}
}

// checkRecords checks the records the independent consumer read against
// what outbox-dev printed.
func checkRecords(t *testing.T, recs []testenv.Record, stdout string) {
	t.Helper()
	printed := map[string]string{} // event_id -> "type aggregate"
	for _, m := range publishedLine.FindAllStringSubmatch(stdout, -1) {
		printed[m[3]] = m[1] + " " + m[2]
	}
	seen := map[string][]string{} // aggregate -> event types in offset order
	for _, r := range recs {
		key := string(r.Key)
		if !regexp.MustCompile(`^pay_\d{6}$`).MatchString(key) {
			t.Errorf("record key %q is not a payment ID", key)
		}
		if r.Headers["source"] != "outbox-dev" {
			t.Errorf("%s: header source = %q, want outbox-dev", key, r.Headers["source"])
		}
		if r.Headers["aggregate_id"] != key {
			t.Errorf("%s: header aggregate_id = %q", key, r.Headers["aggregate_id"])
		}
		id := r.Headers["event_id"]
		if _, err := uuid.Parse(id); err != nil {
			t.Errorf("%s: header event_id %q: %v", key, id, err)
		}
		typ := r.Headers["event_type"]
		if typ != "payment.authorized" && typ != "payment.captured" {
			t.Errorf("%s: header event_type = %q", key, typ)
		}
		var p samplePayment
		if err := json.Unmarshal(r.Value, &p); err != nil {
			t.Errorf("%s: payload %q: %v", key, r.Value, err)
			continue
		}
		if p.PaymentID != key || "payment."+p.Status != typ || p.Amount <= 0 ||
			len(p.Currency) != 3 || !strings.HasPrefix(p.Customer, "cus_") || p.OccurredAt.IsZero() {
			t.Errorf("%s: unexpected payload %s for event_type %s", key, r.Value, typ)
		}
		if got, ok := printed[id]; ok && got != typ+" "+key {
			t.Errorf("event %s: printed as %q, consumed as %s %s", id, got, typ, key)
		}
		seen[key] = append(seen[key], typ)
	}
	for key, types := range seen {
		if types[0] != "payment.authorized" || len(types) > 1 && types[1] != "payment.captured" {
			t.Errorf("%s: events in order %v, want authorized then captured", key, types)
		}
	}
	if len(seen["pay_000001"]) != 2 {
		t.Errorf("pay_000001: consumed %v, want authorized and captured", seen["pay_000001"])
	}
	// Every printed event was consumed.
	consumed := map[string]bool{}
	for _, r := range recs {
		consumed[r.Headers["event_id"]] = true
	}
	for id, what := range printed {
		if !consumed[id] {
			t.Errorf("printed as published but not consumed: %s %s", what, id)
		}
	}
}

func TestSamplesFlowToGivenDatabaseAndBrokers(t *testing.T) {
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	topic := k.Topic(t, 3)
	d := startDev(t, "--database-url", db.ConnString, "--brokers", strings.Join(k.Brokers, ","),
		"--topic", topic, "--rate", "40")

	lines := d.waitPublished(t, 6)
	for _, l := range lines {
		if _, err := time.ParseDuration(strings.Replace(l[4], "µs", "us", 1)); err != nil {
			t.Errorf("latency %q in %q: %v", l[4], l[0], err)
		}
	}
	out := d.stdout.String()
	for _, want := range []string{
		"Kafka: " + strings.Join(k.Brokers, ","),
		"kcat -b " + k.Brokers[0] + " -t " + topic + " -C -o beginning -f 'key=%k headers=%h value=%s\\n'",
		"psql '",
		latencyLegend,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "throwaway") {
		t.Errorf("started a throwaway cluster although --database-url was given:\n%s", out)
	}

	if err := d.stop(t); err != nil {
		t.Fatalf("run after cancel: %v", err)
	}
	out = d.stdout.String()
	m := regexp.MustCompile(`stopped: (\d+) sample events written, (\d+) events published by this relay`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no summary line in stdout:\n%s", out)
	}
	var written, published int
	fmt.Sscan(m[1], &written)
	fmt.Sscan(m[2], &published)

	ctx := context.Background()
	var rows, unpublished, leased int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE published_at IS NULL),
		count(*) FILTER (WHERE published_at IS NULL AND locked_by IS NOT NULL) FROM outbox`).Scan(&rows, &unpublished, &leased); err != nil {
		t.Fatal(err)
	}
	if rows != written || published != rows-unpublished {
		t.Errorf("summary says %d written, %d published; table has %d rows, %d unpublished", written, published, rows, unpublished)
	}
	if leased != 0 {
		t.Errorf("%d unpublished rows still leased after a graceful stop", leased)
	}

	recs := k.Consume(t, topic, published, 30*time.Second)
	if len(recs) < published {
		t.Fatalf("consumed %d records, want at least %d", len(recs), published)
	}
	checkRecords(t, recs, out)
}

func TestThrowawayStackStartsAndCleansUp(t *testing.T) {
	if _, err := pgtemp.FindBinDir(); err != nil {
		t.Skipf("no PostgreSQL server binaries: %v", err)
	}
	// Nothing may come from the environment: run must start its own stack.
	for _, v := range []string{"DATABASE_URL", "OUTBOX_DATABASE_URL", "OUTBOX_BROKERS", "OUTBOX_BROKER_PORT"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	port := freePort(t)
	d := startDev(t, "--broker-port", fmt.Sprint(port), "--topic", "devtest", "--rate", "40")
	d.waitPublished(t, 4)

	out := d.stdout.String()
	dir := regexp.MustCompile(`PostgreSQL \(throwaway, removed on exit\): (\S+)`).FindStringSubmatch(out)
	dsn := regexp.MustCompile(`DATABASE_URL=(postgres://\S+)`).FindStringSubmatch(out)
	if dir == nil || dsn == nil {
		t.Fatalf("stdout names no throwaway cluster directory or DATABASE_URL:\n%s", out)
	}
	if _, err := os.Stat(dir[1]); err != nil {
		t.Fatalf("cluster directory: %v", err)
	}
	broker := fmt.Sprintf("127.0.0.1:%d", port)
	for _, want := range []string{
		"Kafka (embedded, in memory): " + broker,
		fmt.Sprintf("kcat -b localhost:%d -t devtest -C -o beginning -f 'key=%%k headers=%%h value=%%s\\n'", port),
		" status --database-url '" + dsn[1] + "'",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	// Without --metrics-port, a free port on 127.0.0.1.
	if m := regexp.MustCompile(`curl (http://127\.0\.0\.1:\d+)/healthz`).FindStringSubmatch(out); m == nil {
		t.Errorf("stdout names no /healthz on 127.0.0.1:\n%s", out)
	} else if code, body := httpGet(t, m[1]+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("%s/healthz: %d %q", m[1], code, body)
	}

	// Consume at least what was printed so far (more may come meanwhile).
	k := &testenv.TestKafka{Brokers: []string{broker}}
	snapshot := d.stdout.String()
	n := len(publishedLine.FindAllString(snapshot, -1))
	recs := k.Consume(t, "devtest", n, 30*time.Second)
	if len(recs) < n {
		t.Fatalf("consumed %d records from the embedded broker, want at least %d", len(recs), n)
	}
	checkRecords(t, recs, snapshot)

	if err := d.stop(t); err != nil {
		t.Fatalf("run after cancel: %v", err)
	}
	if _, err := os.Stat(dir[1]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cluster directory %s still there after stop (stat: %v)", dir[1], err)
	}
	pgAddr := regexp.MustCompile(`@([\d.]+:\d+)/`).FindStringSubmatch(dsn[1])
	for _, addr := range []string{broker, pgAddr[1]} {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			t.Errorf("%s still accepts connections after stop", addr)
		}
	}
	out = d.stdout.String()
	for _, want := range []string{"removed", "embedded broker closed", "stopped: "} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q after stop:\n%s", want, out)
		}
	}
}

// TestRealKafkaBroker: --kafka 4.4.0 starts a real Apache Kafka broker
// instead of the embedded one (internal/kafkatemp), with the topic
// created; the samples flow to it, an independent consumer reads them in
// order, and on stop the broker's process and directory are gone. It
// skips, saying what to install, where java or mvn is missing (fails
// under CI=true).
func TestRealKafkaBroker(t *testing.T) {
	testenv.RequireKafkaTools(t)
	db := testenv.MigratedDB(t)
	for _, v := range []string{"OUTBOX_BROKERS", "OUTBOX_KAFKA"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	d := startDev(t, "--database-url", db.ConnString, "--kafka", "4.4.0", "--topic", "devreal", "--rate", "40")
	d.waitPublished(t, 6)

	out := d.stdout.String()
	m := regexp.MustCompile(`Kafka \(Apache Kafka 4\.4\.0, throwaway, removed on exit\): (127\.0\.0\.1:\d+)\n  its log: (\S+)/node1/server\.log`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("stdout names no real broker:\n%s", out)
	}
	broker, dir := m[1], m[2]
	if broker == "127.0.0.1:9092" && strings.Contains(out, "embedded") {
		t.Errorf("the embedded broker started too:\n%s", out)
	}
	if !strings.Contains(out, "kcat -b "+broker+" -t devreal") {
		t.Errorf("stdout has no kcat command for %s:\n%s", broker, out)
	}
	k := &testenv.TestKafka{Brokers: []string{broker}}
	// The topic was created with 3 partitions, as the embedded broker's.
	cl := k.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr("devreal")
	req.Topics = append(req.Topics, mt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 3 {
		t.Errorf("topic devreal: %v %+v", err, resp)
	}
	snapshot := d.stdout.String()
	n := len(publishedLine.FindAllString(snapshot, -1))
	recs := k.Consume(t, "devreal", n, 30*time.Second)
	if len(recs) < n {
		t.Fatalf("consumed %d records from the real broker, want at least %d", len(recs), n)
	}
	checkRecords(t, recs, snapshot)

	if err := d.stop(t); err != nil {
		t.Fatalf("run after cancel: %v", err)
	}
	if !strings.Contains(d.stdout.String(), "Kafka broker stopped, "+dir+" removed") {
		t.Errorf("stdout does not say the broker stopped:\n%s", d.stdout.String())
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("broker directory %s still there after stop (stat: %v)", dir, err)
	}
	if c, err := net.DialTimeout("tcp", broker, time.Second); err == nil {
		c.Close()
		t.Errorf("%s still accepts connections after stop", broker)
	}
}

// httpGet returns the status code and body of a GET of url.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// The banner's endpoints answer as outbox-relay run's do, on
// 127.0.0.1:--metrics-port, and its outbox-relay status command works
// against the stack's database; the endpoints go away with the stack.
func TestBannerEndpointsAndStatusCommandWork(t *testing.T) {
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	topic := k.Topic(t, 1)
	port := freePort(t)
	d := startDev(t, "--database-url", db.ConnString, "--brokers", strings.Join(k.Brokers, ","),
		"--topic", topic, "--rate", "40", "--metrics-port", fmt.Sprint(port))
	d.waitPublished(t, 2)
	out := d.stdout.String()
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	for _, w := range []string{"curl " + base + "/metrics", "curl " + base + "/healthz", "curl " + base + "/readyz"} {
		if !strings.Contains(out, w) {
			t.Errorf("stdout lacks %q:\n%s", w, out)
		}
	}
	if code, body := httpGet(t, base+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := httpGet(t, base+"/readyz")
		var r struct{ Ready bool }
		if code == http.StatusOK && json.Unmarshal([]byte(body), &r) == nil && r.Ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not ready after 30s: %d %s", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, scrape := httpGet(t, base+"/metrics")
	for _, w := range []string{`outbox_published_events_total{topic="` + topic + `"}`, "outbox_relay_up 1", "outbox_oldest_unpublished_age_seconds ", "outbox_listener_connected 1"} {
		if !strings.Contains(scrape, w) {
			t.Errorf("/metrics lacks %q", w)
		}
	}

	m := regexp.MustCompile(`(?m)^  (?:\./bin/outbox-relay|go run \./cmd/outbox-relay) status --database-url '([^']+)'$`).FindStringSubmatch(out)
	if m == nil || m[1] != db.ConnString {
		t.Fatalf("stdout has no outbox-relay status command for %s:\n%s", db.ConnString, out)
	}
	bin := filepath.Join(t.TempDir(), "outbox-relay")
	if b, err := exec.Command("go", "build", "-o", bin, "../outbox-relay").CombinedOutput(); err != nil {
		t.Fatalf("build outbox-relay: %v\n%s", err, b)
	}
	// A line is printed at Kafka's ack, before the relay marks the row:
	// status counts published rows once one is marked.
	testenv.Eventually(t, 30*time.Second, func() bool {
		var n int
		return db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox WHERE published_at IS NOT NULL").Scan(&n) == nil && n > 0
	}, "no row marked published")
	status, err := exec.Command(bin, "status", "--database-url", m[1]).CombinedOutput()
	if err != nil || !strings.Contains(string(status), "outbox table outbox") || !regexp.MustCompile(`published \(kept\)\s+[1-9]`).Match(status) {
		t.Errorf("the printed status command: %v\n%s", err, status)
	}

	if err := d.stop(t); err != nil {
		t.Fatalf("run after cancel: %v", err)
	}
	if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err == nil {
		c.Close()
		t.Errorf("the metrics port still accepts connections after stop")
	}
}

func TestMetricsPortTakenFailsFastNamingTheFlag(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	err = run(context.Background(), []string{"--metrics-port", fmt.Sprint(port), "--brokers", "127.0.0.1:1", "--database-url", "postgres://u@127.0.0.1:1/db"}, io.Discard, io.Discard)
	if !isUsage(err) || !strings.Contains(err.Error(), "--metrics-port") || !strings.Contains(err.Error(), "already in use") {
		t.Fatalf("run with a taken metrics port: %v; want a usage error naming --metrics-port", err)
	}
}

// brokenPipe accepts n writes, then fails like a closed pipe.
type brokenPipe struct {
	mu sync.Mutex
	n  int
}

func (b *brokenPipe) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n <= 0 {
		return 0, syscall.EPIPE
	}
	b.n--
	return len(p), nil
}

func TestClosedStdoutStopsCleanly(t *testing.T) {
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	topic := k.Topic(t, 1)
	var stderr testenv.SyncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(context.Background(), []string{"--database-url", db.ConnString,
			"--brokers", strings.Join(k.Brokers, ","), "--topic", topic, "--rate", "40"}, &brokenPipe{n: 15}, &stderr)
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("run did not stop after stdout broke; stderr:\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), "stdout is closed; stopping") {
		t.Errorf("stderr does not say why it stopped:\n%s", stderr.String())
	}
}

func TestBrokerPortTakenFailsFastNamingTheFlag(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	start := time.Now()
	var stdout, stderr bytes.Buffer
	err = run(context.Background(), []string{"--broker-port", fmt.Sprint(port), "--database-url", "postgres://u@127.0.0.1:1/db"}, &stdout, &stderr)
	if err == nil || !isUsage(err) || !strings.Contains(err.Error(), "--broker-port") ||
		!strings.Contains(err.Error(), "already in use") {
		t.Fatalf("run with a taken port: %v; want a usage error about the port suggesting --broker-port", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("took %s to fail", time.Since(start))
	}
}

func TestFlags(t *testing.T) {
	bad := []struct {
		args []string
		want string
	}{
		{[]string{"--rate", "0"}, "--rate"},
		{[]string{"--rate", "-2"}, "--rate"},
		{[]string{"--rate", "x"}, "rate"},
		{[]string{"--broker-port", "70000"}, "--broker-port"},
		{[]string{"--metrics-port", "-1"}, "--metrics-port"},
		{[]string{"--topic", ""}, "--topic"},
		{[]string{"--log-format", "xml"}, "--log-format"},
		{[]string{"--log-level", "loud"}, "--log-level"},
		{[]string{"--brokers", "localhost", "--database-url", "postgres://u@127.0.0.1:1/db"}, "--brokers"},
		{[]string{"--kafka", "2.8.0"}, "--kafka"},
		{[]string{"--kafka", "4.4.0", "--brokers", "kafka:9092"}, "--kafka"},
		{[]string{"--kafka", "4.4.0", "--broker-port", "19092"}, "--broker-port"},
		{[]string{"--nope"}, "nope"},
		{[]string{"extra"}, "extra"},
	}
	for _, tc := range bad {
		err := run(context.Background(), tc.args, io.Discard, io.Discard)
		if !isUsage(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v; want a usage error naming %q", tc.args, err, tc.want)
		}
	}
	t.Setenv("DATABASE_URL", "postgres://u:s3cret@from-env/db")
	var help bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, io.Discard, &help); !errors.Is(err, flag.ErrHelp) ||
		!strings.Contains(help.String(), "-broker-port") || strings.Contains(help.String(), "s3cret") {
		t.Errorf("--help: %v, usage %q", err, help.String())
	}

	// The environment sets the other flags, but never where the samples go.
	t.Setenv("DATABASE_URL", "postgres://from-env/db")
	t.Setenv("OUTBOX_DATABASE_URL", "postgres://outbox-env/db")
	t.Setenv("OUTBOX_BROKERS", "kafka-from-env:9092")
	t.Setenv("OUTBOX_RATE", "7.5")
	t.Setenv("OUTBOX_BROKER_PORT", "19092")
	o, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.databaseURL != "" || o.rate != 7.5 || o.brokerPort != 19092 ||
		o.topic != "payments" || o.logFormat != "console" || o.brokers != "" {
		t.Errorf("from the environment: %+v", *o)
	}
	if o, err = parseFlags([]string{"--rate", "3", "--database-url", "postgres://flag/db", "--brokers", "kafka-flag:9092"}, io.Discard); err != nil ||
		o.databaseURL != "postgres://flag/db" || o.brokers != "kafka-flag:9092" || o.rate != 3 {
		t.Errorf("explicit flags: %+v, %v", o, err)
	}
}

// endOffset returns the end offset of partition 0 of topic: the number of
// records ever produced to it.
func endOffset(t *testing.T, k *testenv.TestKafka, topic string) int64 {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	p := kmsg.NewListOffsetsRequestTopicPartition()
	p.Partition, p.Timestamp = 0, -1 // latest
	rt.Partitions = append(rt.Partitions, p)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, k.Client(t))
	if err != nil {
		t.Fatalf("list offsets: %v", err)
	}
	rp := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
		t.Fatalf("list offsets of %s: %v", topic, err)
	}
	return rp.Offset
}

// TestEnvironmentAloneChoosesNeitherDatabaseNorBrokers: with DATABASE_URL,
// OUTBOX_DATABASE_URL and OUTBOX_BROKERS exported (a shell set up for the
// real relay) and no --database-url or --brokers on the command line, the
// dev stack still uses its own throwaway database and embedded broker, says
// so, and names the database it writes to before the first sample event.
func TestEnvironmentAloneChoosesNeitherDatabaseNorBrokers(t *testing.T) {
	if _, err := pgtemp.FindBinDir(); err != nil {
		t.Skipf("no PostgreSQL server binaries: %v", err)
	}
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	topic := k.Topic(t, 1)
	t.Setenv("DATABASE_URL", db.ConnString)
	t.Setenv("OUTBOX_DATABASE_URL", db.ConnString)
	t.Setenv("OUTBOX_BROKERS", strings.Join(k.Brokers, ","))
	t.Setenv("OUTBOX_BROKER_PORT", "")
	port := freePort(t)
	d := startDev(t, "--broker-port", fmt.Sprint(port), "--topic", topic, "--rate", "40")
	d.waitPublished(t, 2)
	if err := d.stop(t); err != nil {
		t.Fatalf("run after cancel: %v", err)
	}
	out := d.stdout.String()
	where := regexp.MustCompile(`(?m)^writing 40 sample payment events per second into database "postgres" at 127\.0\.0\.1:\d+ \(throwaway\); Ctrl-C to stop$`).FindStringIndex(out)
	first := publishedLine.FindStringIndex(out)
	if where == nil || first == nil || where[0] > first[0] {
		t.Errorf("stdout does not name the throwaway database before the first sample event:\n%s", out)
	}
	for _, w := range []string{"DATABASE_URL, OUTBOX_DATABASE_URL are set but not used", "OUTBOX_BROKERS is set but not used", "Kafka (embedded, in memory): 127.0.0.1:" + fmt.Sprint(port)} {
		if !strings.Contains(out, w) {
			t.Errorf("stdout lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, db.ConnString) {
		t.Errorf("stdout shows the environment's database URL:\n%s", out)
	}
	var rows int
	if err := db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox").Scan(&rows); err != nil || rows != 0 {
		t.Errorf("the environment's database got %d sample rows (%v)", rows, err)
	}
	if n := endOffset(t, k, topic); n != 0 {
		t.Errorf("the environment's broker got %d sample records", n)
	}
}

func TestSampleEvents(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for i, want := range []struct{ agg, typ string }{
		{"pay_000001", "payment.authorized"}, {"pay_000001", "payment.captured"},
		{"pay_000002", "payment.authorized"}, {"pay_000002", "payment.captured"},
	} {
		ev := sampleEvent(int64(i), now)
		if ev.AggregateID != want.agg || ev.Type != want.typ || ev.Headers["source"] != "outbox-dev" || ev.ID == uuid.Nil {
			t.Errorf("event %d: %+v, want %s %s", i, ev, want.typ, want.agg)
		}
		var p samplePayment
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			t.Fatal(err)
		}
		if p.PaymentID != want.agg || "payment."+p.Status != want.typ || p.Amount <= 0 || p.Currency == "" || p.Customer == "" {
			t.Errorf("event %d payload %s", i, ev.Payload)
		}
	}
	a, c := sampleEvent(0, now), sampleEvent(1, now)
	var pa, pc samplePayment
	_ = json.Unmarshal(a.Payload, &pa)
	_ = json.Unmarshal(c.Payload, &pc)
	if pa.Amount != pc.Amount || pa.Currency != pc.Currency || pa.Customer != pc.Customer {
		t.Errorf("authorization %s and capture %s of one payment differ", a.Payload, c.Payload)
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:secret@h:5432/db?sslmode=disable": "postgres://u:xxxxx@h:5432/db?sslmode=disable",
		"postgres://postgres@127.0.0.1:5/postgres":      "postgres://postgres@127.0.0.1:5/postgres",
		"host=h user=u password=secret":                 "<connection string with password>",
		"host=h user=u":                                 "host=h user=u",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// A second Ctrl-C ends outbox-dev at once, without the graceful stop, but
// the throwaway cluster is still stopped and its directory removed.
func TestSecondSignalStillRemovesTheCluster(t *testing.T) {
	if _, err := pgtemp.FindBinDir(); err != nil {
		t.Skipf("no PostgreSQL server binaries: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "outbox-dev")
	if b, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	var stdout, stderr testenv.SyncBuffer
	cmd := exec.Command(bin, "--broker-port", fmt.Sprint(freePort(t)), "--topic", "devkill", "--rate", "40")
	cmd.Env = append(os.Environ(), "DATABASE_URL=", "OUTBOX_DATABASE_URL=", "OUTBOX_BROKERS=", "OUTBOX_BROKER_PORT=")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
		}
	})
	var dir string
	testenv.Eventually(t, 90*time.Second, func() bool {
		m := regexp.MustCompile(`PostgreSQL \(throwaway, removed on exit\): (\S+)`).FindStringSubmatch(stdout.String())
		if m != nil && publishedLine.MatchString(stdout.String()) {
			dir = m[1]
		}
		return dir != ""
	}, "the banner and a published event")
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	// The second signal once the first was handled (the line says so).
	testenv.Eventually(t, 30*time.Second, func() bool {
		return strings.Contains(stderr.String(), "a second Ctrl-C stops at once")
	}, "outbox-dev's line about the first signal")
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		exited <- nil // for the cleanup
	case <-time.After(60 * time.Second):
		t.Fatal("outbox-dev did not exit within 60s of two SIGINTs")
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cluster directory %s still there after two SIGINTs (stat: %v)", dir, err)
	}
	if !strings.Contains(stderr.String(), "second signal: stopping at once") {
		t.Errorf("stderr does not say the second signal stopped outbox-dev at once")
	}
}
