package kafkatemp

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// start starts a cluster for the test, or skips it when java or mvn is
// missing (fails under CI=true).
func start(t *testing.T, opts Options) *Cluster {
	t.Helper()
	if err := CheckTools(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	opts.FastStart = true
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// roundTrip creates a topic, produces a record and reads it back.
func roundTrip(t *testing.T, opts ...kgo.Opt) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 3, -1, nil, "rt"); err != nil {
		t.Fatalf("create topic: %v", err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "rt", Key: []byte("k"), Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	cl.AddConsumeTopics("rt")
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("record not read back: %v", err)
		}
		var got []*kgo.Record
		fs.EachRecord(func(r *kgo.Record) { got = append(got, r) })
		if len(got) > 0 {
			if string(got[0].Value) != "v" {
				t.Fatalf("read %q, want v", got[0].Value)
			}
			return
		}
	}
}

func TestOneBrokerOfEachVersion(t *testing.T) {
	// An empty SOURCE_DATE_EPOCH (make outside a git checkout) must not
	// reach the JDK, whose Properties.store cannot parse it.
	t.Setenv("SOURCE_DATE_EPOCH", "")
	for _, v := range Versions {
		t.Run(v, func(t *testing.T) {
			c := start(t, Options{Version: v})
			if c.Version() != v {
				t.Fatalf("Version() = %s", c.Version())
			}
			roundTrip(t, kgo.SeedBrokers(c.Brokers()...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		})
	}
}

func TestThreeBrokersKillAndRestart(t *testing.T) {
	c := start(t, Options{Brokers: 3})
	roundTrip(t, kgo.SeedBrokers(c.Brokers()...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	n := c.Node(2)
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	if n.Running() {
		t.Fatal("node 2 runs after Kill")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitBrokers(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if err := n.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := n.Resume(); err != nil {
		t.Fatal(err)
	}
}

func TestSASLAndTLSListeners(t *testing.T) {
	c := start(t, Options{SASL: []User{{Name: "alice", Password: "alice-secret"}}, TLS: true})
	auth := scram.Auth{User: "alice", Pass: "alice-secret"}
	roundTrip(t, kgo.SeedBrokers(c.SASLBrokers()...), kgo.SASL(auth.AsSha512Mechanism()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))

	files := c.TLS()
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(files.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool.AppendCertsFromPEM(ca)
	cert, err := tls.LoadX509KeyPair(files.ClientCert, files.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.TLSBrokers()...), kgo.DialTLSConfig(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.Ping(ctx); err != nil {
		t.Fatalf("TLS ping: %v", err)
	}
}

// TestLoggersAndCPUs: Options.Loggers turns the request logger on (a line
// per request, naming its API and version, in the node's server.log) and
// Options.CPUs pins the JVM, all its threads included, to CPU 0.
func TestLoggersAndCPUs(t *testing.T) {
	if _, err := exec.LookPath("taskset"); err != nil {
		t.Skipf("taskset not found (util-linux): %v", err)
	}
	c := start(t, Options{Loggers: map[string]string{"kafka.request.logger": "DEBUG"}, CPUs: "0"})
	roundTrip(t, kgo.SeedBrokers(c.Brokers()...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	n := c.Node(1)
	// The broker logs a request once it has completed it, after the
	// client has its answer: read the log until the lines are there (or
	// a hang guard has passed), not once.
	wants := []string{`"requestApiKeyName":"PRODUCE"`, `"requestApiKeyName":"FETCH"`, "(kafka.request.logger)"}
	var missing []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		testLog, err := os.ReadFile(n.LogPath())
		if err != nil {
			t.Fatal(err)
		}
		missing = missing[:0]
		for _, want := range wants {
			if !strings.Contains(string(testLog), want) {
				missing = append(missing, want)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, want := range missing {
		t.Errorf("server.log has no %s after 30 s:\n%s", want, n.LogTail(2000))
	}
	if c.CPUs() != "0" || !slices.Contains(c.JVMFlags(), "-XX:+UseSerialGC") {
		t.Errorf("CPUs() = %q, JVMFlags() = %v", c.CPUs(), c.JVMFlags())
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", n.PID()))
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) < 10 {
		t.Errorf("the JVM has %d threads", len(tasks))
	}
	for _, task := range tasks {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", n.PID(), task.Name()))
		if err != nil {
			continue // the thread exited
		}
		for _, line := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok && strings.TrimSpace(v) != "0" {
				t.Errorf("thread %s may run on CPUs %s, want 0", task.Name(), strings.TrimSpace(v))
			}
		}
	}
}

func TestLog4jConfigLoggers(t *testing.T) {
	got := log4jConfig(map[string]string{"kafka.request.logger": "DEBUG", "kafka.network": "TRACE"})
	for _, want := range []string{
		"logger.extra0.name = kafka.network\nlogger.extra0.level = TRACE\n",
		"logger.extra1.name = kafka.request.logger\nlogger.extra1.level = DEBUG\n",
		"rootLogger.level = warn\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("log4j2 config lacks %q:\n%s", want, got)
		}
	}
	ctx := context.Background()
	if _, err := Start(ctx, Options{Loggers: map[string]string{"x": "DEBUG\nrootLogger.level = off"}}); err == nil || !strings.Contains(err.Error(), "Options.Loggers") {
		t.Errorf("a level with a newline: %v, want an error naming Options.Loggers", err)
	}
}

// A port taken between its pick and the broker's bind (make test saw
// "Address already in use" from a 4.4.0 broker started beside a 3.9.1
// one) makes Start start over with new ports instead of failing. The
// first pick here hands out a port another listener holds.
func TestStartPicksNewPortsWhenOneIsTaken(t *testing.T) {
	taken, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", taken[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	picks := 0
	pickPorts = func(n int) ([]int, error) {
		picks++
		ports, err := freePorts(n)
		if err == nil && picks == 1 {
			ports[0] = taken[0]
		}
		return ports, err
	}
	defer func() { pickPorts = freePorts }()
	c := start(t, Options{Proxied: true})
	if picks != 2 {
		t.Fatalf("ports picked %d times, want 2 (the first with the taken port)", picks)
	}
	roundTrip(t, kgo.SeedBrokers(c.Brokers()...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	// The proxy made on the second pick forwards to its new port.
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ProxiedBrokers()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "rt", Value: []byte("proxied")}).FirstErr(); err != nil {
		t.Fatalf("produce through the proxy: %v", err)
	}
}

// TestProxiedListener: with Options.Proxied a client of ProxiedBrokers
// reaches the broker only through the node's proxy (the broker advertises
// the proxy on that listener), so the proxy can hold its Produce requests
// while a client of Brokers goes on; the proxy survives a restart.
func TestProxiedListener(t *testing.T) {
	c := start(t, Options{Proxied: true})
	n := c.Node(1)
	p := n.Proxy()
	if p == nil || !slices.Equal(c.ProxiedBrokers(), []string{p.Addr()}) {
		t.Fatalf("Proxy() = %v, ProxiedBrokers() = %v", p, c.ProxiedBrokers())
	}
	roundTrip(t, kgo.SeedBrokers(c.ProxiedBrokers()...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if p.Accepted() == 0 {
		t.Fatal("the proxied client made no connection through the proxy")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	client := func(seeds []string) *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic("held"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	proxied, direct := client(c.ProxiedBrokers()), client(c.Brokers())
	for cl, want := range map[*kgo.Client]string{proxied: p.Addr(), direct: n.Addr()} {
		md, err := kadm.NewClient(cl).BrokerMetadata(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(md.Brokers) != 1 || net.JoinHostPort(md.Brokers[0].Host, fmt.Sprint(md.Brokers[0].Port)) != want {
			t.Fatalf("brokers advertised to a client of %s: %+v", want, md.Brokers)
		}
	}
	// One partition: the offsets tell the order the broker wrote in.
	if _, err := kadm.NewClient(direct).CreateTopic(ctx, 1, -1, nil, "held"); err != nil {
		t.Fatalf("create topic: %v", err)
	}
	produce := func(cl *kgo.Client, value string) *kgo.Record {
		t.Helper()
		r, err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(value)}).First()
		if err != nil {
			t.Fatalf("produce %s: %v", value, err)
		}
		return r
	}
	// Warm up: both clients have their connections and producer IDs.
	produce(proxied, "warm proxied")
	produce(direct, "warm direct")

	held := p.HeldFrames()
	p.HoldKafka(0) // Produce
	late := make(chan *kgo.Record, 1)
	proxied.Produce(ctx, &kgo.Record{Value: []byte("late")}, func(r *kgo.Record, err error) {
		if err != nil {
			t.Errorf("held produce: %v", err)
		}
		late <- r
	})
	for p.HeldFrames() == held {
		if ctx.Err() != nil {
			t.Fatal("the proxied produce was not held")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The request is held in the proxy: the broker cannot have answered
	// it. The direct client is not held meanwhile.
	onTime := produce(direct, "on time")
	select {
	case <-late:
		t.Fatal("the held produce completed before ReleaseHeld")
	default:
	}
	p.ReleaseHeld()
	select {
	case r := <-late:
		if r.Offset <= onTime.Offset {
			t.Errorf("held record at offset %d, the direct one at %d: want it written after", r.Offset, onTime.Offset)
		}
	case <-ctx.Done():
		t.Fatal("the held produce did not complete after ReleaseHeld")
	}

	// The proxy stays the node's across a restart, and the proxied
	// client gets through it again.
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if n.Proxy() != p {
		t.Fatal("the node's proxy changed across a restart")
	}
	accepted := p.Accepted()
	produce(proxied, "after restart")
	if p.Accepted() == accepted {
		t.Error("the proxied client did not reconnect through the proxy")
	}
}
