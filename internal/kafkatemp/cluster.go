package kafkatemp

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgoutbox/outbox/internal/tcpproxy"
)

// Options configures Start. The zero value is one Kafka 4.4.0 broker with
// automatic topic creation on, as Kafka ships it.
type Options struct {
	// Version is the Kafka version to run; default V44.
	Version string
	// Brokers is the number of nodes, each a combined broker and
	// controller; default 1. With 3 or more the defaults give a
	// production-like cluster: replication factor 3 and
	// min.insync.replicas 2 for new topics and internal topics.
	Brokers int
	// Props are extra server.properties settings for every node; they
	// override the defaults Start writes (see Cluster.Props).
	Props map[string]string
	// SASL adds a SASL_PLAINTEXT listener on every node with the
	// mechanisms PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 for these users
	// (Cluster.SASLBrokers). Nil means no SASL listener.
	SASL []User
	// TLS adds an SSL listener on every node with a certificate for
	// 127.0.0.1 and localhost signed by a CA generated for the cluster
	// (Cluster.TLSBrokers, Cluster.CAFile).
	TLS bool
	// Proxied adds a PLAINTEXT listener named PROXIED on every node whose
	// advertised address is a tcpproxy.Proxy in front of it (Node.Proxy),
	// so that a client bootstrapping from Cluster.ProxiedBrokers reaches
	// every broker through the proxies, and a fault test can break or
	// hold its traffic alone. Brokers talk to each other, and clients of
	// the other listeners to them, directly.
	Proxied bool
	// HeapMB is each JVM's maximum heap; default 512.
	HeapMB int
	// FastStart runs each JVM with the C1 compiler only and the serial
	// GC: it starts in about half the CPU time and answers slower under
	// load. Tests want it; latency benchmarks do not.
	FastStart bool
	// TempDir is the parent of the cluster's directory; default
	// os.TempDir().
	TempDir string
	// StartTimeout bounds Start and Node.Start; default 120 s.
	StartTimeout time.Duration
	// Loggers sets log4j2 logger levels besides the defaults (warnings
	// and errors, plus the broker's start and shutdown lines), by logger
	// name, e.g. {"kafka.request.logger": "DEBUG"}: a line per request
	// with its API key, version and client ID. Everything goes to the
	// node's server.log (Node.LogPath).
	Loggers map[string]string
	// CPUs pins every node's JVM to these CPUs (taskset(1)'s list
	// format, e.g. "1" or "0,2-3"), set before the JVM starts so that
	// all its threads inherit it: for benchmarks that keep the broker
	// off the cores the code under test runs on. Empty: no pinning.
	// Start fails if taskset is not on the PATH.
	CPUs string
}

// User is a SASL user of the cluster's SASL listener.
type User struct {
	Name, Password string
}

// Cluster is a running throwaway Kafka cluster. Its methods are safe for
// concurrent use.
type Cluster struct {
	dist    *Dist
	dir     string
	opts    Options
	nodes   []*Node
	caFile  string
	timeout time.Duration

	mu     sync.Mutex
	closed bool
}

// Node is one broker-and-controller process of a Cluster.
type Node struct {
	c *Cluster
	// ID is the node.id, 1 to Brokers.
	ID                   int
	dir, props, logPath  string
	port, controllerPort int
	saslPort, tlsPort    int
	proxiedPort          int             // the PROXIED listener's port
	proxy                *tcpproxy.Proxy // advertised for PROXIED; nil without

	mu     sync.Mutex
	proc   *exec.Cmd
	exited chan struct{}
	paused bool
}

// Start resolves opts.Version (see Resolve), formats KRaft storage for
// every node and starts them, and returns once every broker is registered
// and answers metadata requests. On error nothing is left running. ctx
// bounds the whole start-up. A node that could not bind one of its ports
// makes it start over with new ports, up to three times in all: the ports
// are picked free, but the JVM binds them seconds later, and another
// process (an outgoing connection's ephemeral port) may take one
// meanwhile.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	for attempt := 1; ; attempt++ {
		c, err := startOnce(ctx, opts)
		if err == nil || attempt == 3 || ctx.Err() != nil || !portTaken(err) {
			return c, err
		}
	}
}

// portTaken reports whether a start-up error's log tails say a node
// could not bind a port.
func portTaken(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "Address already in use") || strings.Contains(msg, "failed to bind") ||
		strings.Contains(msg, "openServerSocket")
}

// startOnce is one attempt of Start.
func startOnce(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Version == "" {
		opts.Version = V44
	}
	if opts.Brokers <= 0 {
		opts.Brokers = 1
	}
	if opts.HeapMB <= 0 {
		opts.HeapMB = 512
	}
	timeout := opts.StartTimeout
	if timeout <= 0 {
		timeout = 120 * time.Second
	}
	if opts.CPUs != "" {
		if _, err := exec.LookPath("taskset"); err != nil {
			return nil, &MissingToolError{Tool: "taskset", Install: "apt-get install util-linux"}
		}
	}
	for name, level := range opts.Loggers {
		if name == "" || strings.ContainsAny(name+level, "\n=") || level == "" {
			return nil, fmt.Errorf("kafkatemp: Options.Loggers: %q = %q is not a logger name and a level", name, level)
		}
	}
	dist, err := Resolve(ctx, opts.Version)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(opts.TempDir, "kafkatemp-")
	if err != nil {
		return nil, fmt.Errorf("kafkatemp: create temp dir: %w", err)
	}
	c := &Cluster{dist: dist, dir: dir, opts: opts, timeout: timeout}
	if err := c.prepare(ctx); err != nil {
		_ = c.Close()
		return nil, err
	}
	errs := make(chan error, len(c.nodes))
	for _, n := range c.nodes {
		go func() { errs <- n.launch() }()
	}
	for range c.nodes {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	if err == nil {
		sctx, cancel := context.WithTimeout(ctx, timeout)
		err = c.WaitBrokers(sctx, len(c.nodes))
		cancel()
	}
	if err != nil {
		err = fmt.Errorf("%w%s", err, c.logTails())
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// prepare picks the ports, writes every node's server.properties and
// formats its storage.
func (c *Cluster) prepare(ctx context.Context) error {
	n := c.opts.Brokers
	perNode := 2
	if c.opts.SASL != nil {
		perNode++
	}
	if c.opts.TLS {
		perNode++
	}
	if c.opts.Proxied {
		perNode++
	}
	ports, err := pickPorts(n * perNode)
	if err != nil {
		return err
	}
	for i := range n {
		p := ports[i*perNode : (i+1)*perNode]
		node := &Node{c: c, ID: i + 1, port: p[0], controllerPort: p[1]}
		k := 2
		if c.opts.SASL != nil {
			node.saslPort = p[k]
			k++
		}
		if c.opts.TLS {
			node.tlsPort = p[k]
			k++
		}
		// The node joins c.nodes (and Close closes its proxy) before its
		// proxy is made, which must exist to be advertised.
		c.nodes = append(c.nodes, node)
		if c.opts.Proxied {
			node.proxiedPort = p[k]
			if node.proxy, err = tcpproxy.New(net.JoinHostPort("127.0.0.1", strconv.Itoa(node.proxiedPort))); err != nil {
				return fmt.Errorf("kafkatemp: node %d proxy: %w", node.ID, err)
			}
		}
		node.dir = filepath.Join(c.dir, fmt.Sprintf("node%d", node.ID))
		node.props = filepath.Join(node.dir, "server.properties")
		node.logPath = filepath.Join(node.dir, "server.log")
		if err := os.MkdirAll(node.dir, 0o755); err != nil {
			return fmt.Errorf("kafkatemp: %w", err)
		}
	}
	var tlsProps map[string]string
	if c.opts.TLS {
		if tlsProps, err = c.writeTLS(); err != nil {
			return err
		}
	}
	if err := os.WriteFile(c.log4jPath(), []byte(log4jConfig(c.opts.Loggers)), 0o644); err != nil {
		return fmt.Errorf("kafkatemp: %w", err)
	}
	for _, node := range c.nodes {
		props := c.nodeProps(node)
		maps.Copy(props, tlsProps)
		maps.Copy(props, c.opts.Props)
		if err := writeProps(node.props, props); err != nil {
			return err
		}
	}
	clusterID, err := newClusterID()
	if err != nil {
		return err
	}
	errs := make(chan error, n)
	for _, node := range c.nodes {
		go func() { errs <- node.format(ctx, clusterID) }()
	}
	for range c.nodes {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	return err
}

// Props returns the settings Start writes for a node before Options.Props
// override them: the listeners, KRaft combined mode with static voters, and
// replication defaults fit for the cluster's size.
func (c *Cluster) nodeProps(n *Node) map[string]string {
	size := len(c.nodes)
	rf := strconv.Itoa(min(size, 3))
	minISR := strconv.Itoa(max(1, min(size-1, 2)))
	voters := make([]string, size)
	for i, m := range c.nodes {
		voters[i] = fmt.Sprintf("%d@127.0.0.1:%d", m.ID, m.controllerPort)
	}
	listeners := []string{fmt.Sprintf("PLAINTEXT://127.0.0.1:%d", n.port)}
	protocols := []string{"PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"}
	if n.saslPort != 0 {
		listeners = append(listeners, fmt.Sprintf("SASL_PLAINTEXT://127.0.0.1:%d", n.saslPort))
		protocols = append(protocols, "SASL_PLAINTEXT:SASL_PLAINTEXT")
	}
	if n.tlsPort != 0 {
		listeners = append(listeners, fmt.Sprintf("SSL://127.0.0.1:%d", n.tlsPort))
		protocols = append(protocols, "SSL:SSL")
	}
	advertised := slices.Clone(listeners)
	if n.proxy != nil {
		listeners = append(listeners, fmt.Sprintf("PROXIED://127.0.0.1:%d", n.proxiedPort))
		advertised = append(advertised, "PROXIED://"+n.proxy.Addr())
		protocols = append(protocols, "PROXIED:PLAINTEXT")
	}
	p := map[string]string{
		"process.roles":                                    "broker,controller",
		"node.id":                                          strconv.Itoa(n.ID),
		"controller.quorum.voters":                         strings.Join(voters, ","),
		"controller.listener.names":                        "CONTROLLER",
		"inter.broker.listener.name":                       "PLAINTEXT",
		"listeners":                                        strings.Join(listeners, ",") + fmt.Sprintf(",CONTROLLER://127.0.0.1:%d", n.controllerPort),
		"advertised.listeners":                             strings.Join(advertised, ","),
		"listener.security.protocol.map":                   strings.Join(protocols, ","),
		"log.dirs":                                         filepath.Join(n.dir, "data"),
		"num.partitions":                                   "1",
		"default.replication.factor":                       rf,
		"min.insync.replicas":                              minISR,
		"offsets.topic.replication.factor":                 rf,
		"offsets.topic.num.partitions":                     "4",
		"transaction.state.log.replication.factor":         rf,
		"transaction.state.log.min.isr":                    minISR,
		"transaction.state.log.num.partitions":             "4",
		"share.coordinator.state.topic.replication.factor": rf,
		"share.coordinator.state.topic.min.isr":            minISR,
		"group.initial.rebalance.delay.ms":                 "0",
		"num.network.threads":                              "2",
		"num.io.threads":                                   "4",
		"num.recovery.threads.per.data.dir":                "1",
		"log.segment.bytes":                                strconv.Itoa(64 << 20),
		"delete.topic.enable":                              "true",
	}
	if n.saslPort != 0 {
		p["sasl.enabled.mechanisms"] = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
		var plain strings.Builder
		plain.WriteString("org.apache.kafka.common.security.plain.PlainLoginModule required")
		for _, u := range c.opts.SASL {
			fmt.Fprintf(&plain, " user_%s=%q", u.Name, u.Password)
		}
		plain.WriteString(";")
		p["listener.name.sasl_plaintext.plain.sasl.jaas.config"] = plain.String()
		scram := "org.apache.kafka.common.security.scram.ScramLoginModule required;"
		p["listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config"] = scram
		p["listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config"] = scram
	}
	return p
}

func (c *Cluster) log4jPath() string { return filepath.Join(c.dir, "log4j2.properties") }

// log4jConfig returns the log4j2 configuration: warnings and errors to
// standard output (the node's server.log), plus the broker's start and
// shutdown lines, plus the extra loggers (name to level).
func log4jConfig(extra map[string]string) string {
	var b strings.Builder
	b.WriteString(`status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.out.ref = out
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = info
`)
	for i, name := range slices.Sorted(maps.Keys(extra)) {
		fmt.Fprintf(&b, "logger.extra%d.name = %s\nlogger.extra%d.level = %s\n", i, name, i, extra[name])
	}
	return b.String()
}

func writeProps(path string, props map[string]string) error {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(props)) {
		fmt.Fprintf(&b, "%s=%s\n", k, escapeProp(props[k]))
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("kafkatemp: %w", err)
	}
	return nil
}

// escapeProp escapes a value for a Java properties file.
func escapeProp(v string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(v)
}

// newClusterID returns a random KRaft cluster ID: 16 bytes in URL-safe
// base64 without padding, as kafka-storage random-uuid prints it (never
// starting with '-', which Kafka's own generator avoids too).
func newClusterID() (string, error) {
	for {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", fmt.Errorf("kafkatemp: cluster id: %w", err)
		}
		id := base64.RawURLEncoding.EncodeToString(b[:])
		if id[0] != '-' {
			return id, nil
		}
	}
}

// format runs kafka-storage's format for the node.
func (n *Node) format(ctx context.Context, clusterID string) error {
	args := []string{"kafka.tools.StorageTool", "format", "-t", clusterID, "-c", n.props}
	for _, u := range n.c.opts.SASL {
		for _, mech := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512"} {
			args = append(args, "--add-scram", fmt.Sprintf("%s=[name=%s,password=%s]", mech, u.Name, u.Password))
		}
	}
	cmd := exec.CommandContext(ctx, "java", append(n.c.jvmArgs(128, true), args...)...)
	cmd.Dir = n.dir
	cmd.Env = javaEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("kafkatemp: format node %d storage: %w: %s", n.ID, err, tail(string(out), 2048))
	}
	return nil
}

// javaEnv is the environment of the java processes: this process's,
// without an empty SOURCE_DATE_EPOCH, which makes the JDK's
// Properties.store (the storage format, every properties file a broker
// writes) fail with NumberFormatException.
func javaEnv() []string {
	env := os.Environ()
	return slices.DeleteFunc(env, func(kv string) bool { return kv == "SOURCE_DATE_EPOCH=" })
}

// jvmArgs are the JVM options and class path of a broker (or of a tool,
// with a small heap and a fast start).
func (c *Cluster) jvmArgs(heapMB int, fast bool) []string {
	return append(c.jvmFlags(heapMB, fast), "-cp", filepath.Join(c.dist.Lib, "*"))
}

// JVMFlags returns the options every node's JVM runs with (heap, GC and
// compiler settings, the log4j2 configuration), without the class path
// and main class: what a benchmark report states about the broker.
func (c *Cluster) JVMFlags() []string { return c.jvmFlags(c.opts.HeapMB, c.opts.FastStart) }

// CPUs returns Options.CPUs: the CPUs the nodes are pinned to, "" for
// none.
func (c *Cluster) CPUs() string { return c.opts.CPUs }

func (c *Cluster) jvmFlags(heapMB int, fast bool) []string {
	args := []string{
		fmt.Sprintf("-Xmx%dm", heapMB), fmt.Sprintf("-Xms%dm", min(heapMB, 256)),
		"-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
		"-Dlog4j2.configurationFile=" + c.log4jPath(),
	}
	if fast {
		args = append(args, "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-XX:-UsePerfData")
	} else {
		// kafka-run-class.sh's defaults.
		args = append(args, "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent")
	}
	return args
}

// launch starts the node's JVM without waiting for it to be ready.
func (n *Node) launch() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc != nil {
		return fmt.Errorf("kafkatemp: node %d is running", n.ID)
	}
	logf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("kafkatemp: node %d log: %w", n.ID, err)
	}
	defer logf.Close()
	args := append(n.c.jvmArgs(n.c.opts.HeapMB, n.c.opts.FastStart), "kafka.Kafka", n.props)
	cmd := exec.Command("java", args...)
	if cpus := n.c.opts.CPUs; cpus != "" {
		// taskset sets the affinity and execs java: same PID, and every
		// JVM thread inherits it.
		cmd = exec.Command("taskset", append([]string{"-c", cpus, "java"}, args...)...)
	}
	cmd.Dir = n.dir
	cmd.Env = javaEnv()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Own process group: a terminal's Ctrl-C goes to the caller, which
		// then stops the brokers in order.
		Setpgid: true,
		// Do not outlive a caller that dies without calling Close.
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("kafkatemp: start node %d: %w", n.ID, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	n.proc, n.exited, n.paused = cmd, exited, false
	return nil
}

// Brokers returns the PLAINTEXT listeners, host:port, in node order.
func (c *Cluster) Brokers() []string { return c.addrs(func(n *Node) int { return n.port }) }

// SASLBrokers returns the SASL_PLAINTEXT listeners (nil without
// Options.SASL).
func (c *Cluster) SASLBrokers() []string {
	if c.opts.SASL == nil {
		return nil
	}
	return c.addrs(func(n *Node) int { return n.saslPort })
}

// TLSBrokers returns the SSL listeners (nil without Options.TLS).
func (c *Cluster) TLSBrokers() []string {
	if !c.opts.TLS {
		return nil
	}
	return c.addrs(func(n *Node) int { return n.tlsPort })
}

// ProxiedBrokers returns the addresses of the nodes' proxies (Node.Proxy),
// in node order: the seed brokers of a client that must reach every broker
// through them (nil without Options.Proxied).
func (c *Cluster) ProxiedBrokers() []string {
	if !c.opts.Proxied {
		return nil
	}
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.proxy.Addr()
	}
	return out
}

func (c *Cluster) addrs(port func(*Node) int) []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(port(n)))
	}
	return out
}

// Version returns the Kafka version the cluster runs.
func (c *Cluster) Version() string { return c.dist.Version }

// Dir returns the cluster's directory (a nodeN directory per node, with
// its server.properties, server.log and data).
func (c *Cluster) Dir() string { return c.dir }

// Nodes returns the nodes in node.id order.
func (c *Cluster) Nodes() []*Node { return slices.Clone(c.nodes) }

// Node returns the node with node.id id (1 to Brokers), or nil.
func (c *Cluster) Node(id int) *Node {
	if id < 1 || id > len(c.nodes) {
		return nil
	}
	return c.nodes[id-1]
}

// WaitBrokers waits until a metadata request to any running node lists
// want brokers, or ctx ends.
func (c *Cluster) WaitBrokers(ctx context.Context, want int) error {
	var last error
	for {
		var running []string
		for _, n := range c.nodes {
			if n.Running() {
				running = append(running, n.Addr())
			}
		}
		got, err := brokersIn(ctx, running)
		if err == nil && got >= want {
			return nil
		}
		if err != nil {
			last = err
		} else {
			last = fmt.Errorf("%d of %d brokers registered", got, want)
		}
		for _, n := range c.nodes {
			if n.exitedEarly() {
				return fmt.Errorf("kafkatemp: node %d exited during start-up", n.ID)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafkatemp: brokers not ready: %w (last: %v)", ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// brokersIn asks seeds for the cluster's metadata and returns how many
// brokers it lists.
func brokersIn(ctx context.Context, seeds []string) (int, error) {
	if len(seeds) == 0 {
		return 0, errors.New("no node running")
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RetryTimeout(time.Second), kgo.DialTimeout(time.Second))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{}
	resp, err := req.RequestWith(rctx, cl)
	if err != nil {
		return 0, err
	}
	return len(resp.Brokers), nil
}

// Close stops every node (SIGKILL: the data is thrown away), closes the
// nodes' proxies (Options.Proxied) and removes the cluster's directory. It
// is idempotent.
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	var err error
	for _, n := range c.nodes {
		if e := n.Kill(); e != nil && err == nil {
			err = e
		}
	}
	for _, n := range c.nodes {
		if n.proxy != nil {
			n.proxy.Close()
		}
	}
	if e := os.RemoveAll(c.dir); e != nil && err == nil {
		err = fmt.Errorf("kafkatemp: remove %s: %w", c.dir, e)
	}
	return err
}

// logTails returns the end of every node's log, for a start-up error.
func (c *Cluster) logTails() string {
	var b strings.Builder
	for _, n := range c.nodes {
		if s := n.LogTail(1500); s != "" {
			fmt.Fprintf(&b, "\n--- node %d log ---\n%s", n.ID, s)
		}
	}
	return b.String()
}

// Addr returns the node's PLAINTEXT listener, host:port.
func (n *Node) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port)) }

// Proxy returns the proxy the node's PROXIED listener is advertised
// through (nil without Options.Proxied). It forwards to the listener, so a
// test can cut, blackhole, delay or hold (HoldKafka) the traffic of
// clients of Cluster.ProxiedBrokers; it stays the same across the node's
// restarts and is closed by Cluster.Close.
func (n *Node) Proxy() *tcpproxy.Proxy { return n.proxy }

// PID returns the node's process ID, or 0 when it is not running.
func (n *Node) PID() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil {
		return 0
	}
	return n.proc.Process.Pid
}

// Running reports whether the node's process runs (paused counts).
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

func (n *Node) exitedEarly() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil {
		return false
	}
	select {
	case <-n.exited:
		return true
	default:
		return false
	}
}

// Kill sends SIGKILL (a crash: no controlled shutdown) and waits for the
// process to exit. A node that is not running is left alone.
func (n *Node) Kill() error { return n.signalStop(syscall.SIGKILL, 30*time.Second) }

// Stop shuts the node down gracefully (SIGTERM: controlled shutdown, its
// partitions' leadership moves first), waiting up to a minute, then kills
// it.
func (n *Node) Stop() error {
	if err := n.signalStop(syscall.SIGTERM, time.Minute); err == nil {
		return nil
	}
	return n.Kill()
}

func (n *Node) signalStop(sig syscall.Signal, wait time.Duration) error {
	n.mu.Lock()
	proc, exited, paused := n.proc, n.exited, n.paused
	n.mu.Unlock()
	if proc == nil {
		return nil
	}
	if paused && sig != syscall.SIGKILL {
		_ = proc.Process.Signal(syscall.SIGCONT)
	}
	_ = proc.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(wait):
		return fmt.Errorf("kafkatemp: node %d (pid %d) did not exit after %v", n.ID, proc.Process.Pid, sig)
	}
	n.mu.Lock()
	if n.proc == proc {
		n.proc, n.exited, n.paused = nil, nil, false
	}
	n.mu.Unlock()
	return nil
}

// Pause freezes the node (SIGSTOP): its connections stay open and nothing
// answers, as a long GC pause or a frozen host does.
func (n *Node) Pause() error { return n.signal(syscall.SIGSTOP, true) }

// Resume continues a paused node (SIGCONT).
func (n *Node) Resume() error { return n.signal(syscall.SIGCONT, false) }

func (n *Node) signal(sig syscall.Signal, paused bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil {
		return fmt.Errorf("kafkatemp: node %d is not running", n.ID)
	}
	if err := n.proc.Process.Signal(sig); err != nil {
		return fmt.Errorf("kafkatemp: node %d: %v: %w", n.ID, sig, err)
	}
	n.paused = paused
	return nil
}

// Launch starts a stopped or killed node again with its data, without
// waiting for it: a node whose controller quorum is not back (two of three
// nodes down) cannot answer until another one starts too. Wait with
// Cluster.WaitBrokers.
func (n *Node) Launch() error { return n.launch() }

// Start starts a stopped or killed node again with its data, and waits
// until it answers a metadata request on its own listener (WaitReady).
func (n *Node) Start(ctx context.Context) error {
	if err := n.launch(); err != nil {
		return err
	}
	return n.WaitReady(ctx)
}

// WaitReady waits until the node answers a metadata request on its own
// listener: it is then a member of the cluster serving clients (a node
// is listed in the cluster's metadata a while before its listener accepts
// connections). It gives up when ctx ends, after the cluster's start
// timeout, or when the node exits.
func (n *Node) WaitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, n.c.timeout)
	defer cancel()
	for {
		if _, err := brokersIn(ctx, []string{n.Addr()}); err == nil {
			return nil
		}
		if n.exitedEarly() {
			return fmt.Errorf("kafkatemp: node %d exited during start-up: %s", n.ID, n.LogTail(1500))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafkatemp: node %d not ready: %w", n.ID, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// LogPath returns the node's server.log: the JVM's standard output and
// error, where log4j2 writes.
func (n *Node) LogPath() string { return n.logPath }

// LogTail returns the last n bytes of the node's log.
func (n *Node) LogTail(size int) string {
	b, err := os.ReadFile(n.logPath)
	if err != nil {
		return ""
	}
	return tail(string(b), size)
}

// pickPorts picks a cluster's ports: freePorts, or a test's stand-in.
var pickPorts = freePorts

// freePorts returns n distinct free loopback ports, held open together
// while they are picked so that none is picked twice.
func freePorts(n int) ([]int, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("kafkatemp: pick a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
