package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox/internal/faultnet"
	"github.com/pgoutbox/outbox/internal/kafkatemp"
	"github.com/pgoutbox/outbox/internal/pgtemp"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

// Env is where benchmarks run: one Postgres and one Kafka cluster. Every
// run creates its own schema (with a fresh outbox table) and its own topic
// in them, and drops the schema afterwards.
type Env struct {
	// DSN is the PostgreSQL URL or keyword/value DSN. Required. Its
	// search_path, if any, is replaced per run.
	DSN string
	// Brokers are Kafka bootstrap brokers, host:port. Required.
	Brokers []string
	// Partitions is the partition count of each run's topic. Defaults to 1.
	Partitions int32
	// Log receives the benchmark's and the relay's logs. Defaults to a
	// no-op logger.
	Log *zap.Logger
	// Progress, if set, receives a progress line every few seconds.
	Progress *Progress
	// Broker describes the broker in the report ("kfake" or "external").
	// Defaults to "external".
	Broker string
	// RelayBin is the outbox-relay binary that the subprocess modes (drain
	// notify-proc, broker-down) run; see BuildRelay.
	RelayBin string
	// RelayBinB is the outbox-relay binary that mode notify-proc-b runs
	// (typically the build before a change, RelayBin being the one after);
	// required for that mode only.
	RelayBinB string
	// RelayArgsB are more `outbox-relay run` flags for the relays of mode
	// notify-proc-b (a value format against a registry: RegistryArgs).
	// Defaults to none.
	RelayArgsB []string
	// SetBrokerUp, if set, makes the broker reachable (true) or takes it
	// down (false); the broker-down scenario needs it (Local.SetBrokerUp:
	// kfake refuses connections, a real broker is killed and restarted).
	SetBrokerUp func(ctx context.Context, up bool) error
	// BrokerOutage says how SetBrokerUp takes the broker down:
	// OutageRefused (the default) or OutageKilled.
	BrokerOutage string
	// BrokerPID, if set, returns the PID of the local broker process
	// (Local.BrokerPID), whose CPU time the cost figures then include
	// (Cost.BrokerCPUS); 0 when none runs.
	BrokerPID func() int
}

// How the broker-down scenario takes the broker down (Env.BrokerOutage,
// BrokerDown.Outage).
const (
	// OutageRefused: the in-process broker closes every connection and
	// refuses new ones on the same address.
	OutageRefused = "refused"
	// OutageKilled: the broker process is SIGKILLed (a crash) and started
	// again with its data after the outage.
	OutageKilled = "sigkill"
)

func (e *Env) validate() error {
	if e.DSN == "" {
		return errors.New("bench: Env.DSN: required")
	}
	if len(e.Brokers) == 0 {
		return errors.New("bench: Env.Brokers: required")
	}
	if e.Partitions == 0 {
		e.Partitions = 1
	}
	if e.Partitions < 0 {
		return fmt.Errorf("bench: Env.Partitions: must be positive, got %d", e.Partitions)
	}
	if e.Log == nil {
		e.Log = zap.NewNop()
	}
	if e.Broker == "" {
		e.Broker = "external"
	}
	if e.BrokerOutage == "" {
		e.BrokerOutage = OutageRefused
	}
	return nil
}

// Local is what StartLocal started: a throwaway Postgres (fsync on) and a
// broker, the in-process kfake or a real Apache Kafka broker.
type Local struct {
	// DSN connects to the throwaway cluster's "postgres" database, or is
	// the one given.
	DSN string
	// Brokers are the broker's addresses, or those given.
	Brokers []string
	// Warmup says how the real broker was warmed up ("" for none).
	Warmup string
	pg     *pgtemp.Cluster
	kafka  *kfake.Cluster
	ln     *faultnet.Listener
	real   *kafkatemp.Cluster
}

// KafkaKfake is LocalConfig.Kafka for the in-process kfake broker.
const KafkaKfake = "kfake"

// Defaults of LocalConfig.
const (
	// DefaultKafkaWarmup is how long a real broker is warmed up before
	// the first run: long enough for its JIT to compile the produce and
	// fetch paths.
	DefaultKafkaWarmup = 10 * time.Second
	// DefaultKafkaHeapMB is a real broker's JVM heap, as
	// kafka-server-start.sh sets it (-Xmx1G).
	DefaultKafkaHeapMB = 1024
)

// LocalConfig says what StartLocal starts.
type LocalConfig struct {
	// DSN is the PostgreSQL to use; empty: a pgtemp cluster with fsync on.
	DSN string
	// Brokers are the Kafka brokers to use; empty: StartLocal starts the
	// one Kafka names.
	Brokers []string
	// Kafka is the broker StartLocal starts when Brokers is empty:
	// KafkaKfake (the default), or an Apache Kafka version (e.g. "4.4.0",
	// see kafkatemp.Versions) for one real broker from internal/kafkatemp
	// with production JVM settings (G1, the full JIT; not FastStart),
	// warmed up for KafkaWarmup. It needs java and mvn.
	Kafka string
	// KafkaCPUs pins the real broker's JVM to these CPUs (taskset -c
	// list, e.g. "1"), to tell the contention of a co-located broker from
	// the relay's own latency. Empty: not pinned.
	KafkaCPUs string
	// KafkaWarmup is how long the real broker is warmed up (records
	// produced with the project's produce.Publisher and read back with
	// franz-go) before StartLocal returns. Zero: DefaultKafkaWarmup;
	// negative: none.
	KafkaWarmup time.Duration
	// KafkaHeapMB is the real broker's JVM heap. Zero:
	// DefaultKafkaHeapMB.
	KafkaHeapMB int
	// Log receives progress lines; nil: none.
	Log *zap.Logger
}

// WithDefaults returns c with the defaults applied.
func (c LocalConfig) WithDefaults() LocalConfig {
	if c.Kafka == "" {
		c.Kafka = KafkaKfake
	}
	if c.KafkaWarmup == 0 {
		c.KafkaWarmup = DefaultKafkaWarmup
	}
	if c.KafkaHeapMB == 0 {
		c.KafkaHeapMB = DefaultKafkaHeapMB
	}
	if c.Log == nil {
		c.Log = zap.NewNop()
	}
	return c
}

// Validate returns an error naming the first invalid field.
func (c LocalConfig) Validate() error {
	c = c.WithDefaults()
	if c.Kafka != KafkaKfake && !validVersion(c.Kafka) {
		return fmt.Errorf("bench: LocalConfig.Kafka: %q is not kfake or a Kafka version such as %s", c.Kafka, strings.Join(kafkatemp.Versions, " or "))
	}
	if len(c.Brokers) > 0 && c.Kafka != KafkaKfake {
		return fmt.Errorf("bench: LocalConfig.Kafka: %s starts a broker, and Brokers are given: choose one", c.Kafka)
	}
	if c.KafkaCPUs != "" && c.Kafka == KafkaKfake {
		return errors.New("bench: LocalConfig.KafkaCPUs: pins a real broker; the kfake broker runs in this process")
	}
	if c.KafkaCPUs != "" && strings.Trim(c.KafkaCPUs, "0123456789,-") != "" {
		return fmt.Errorf("bench: LocalConfig.KafkaCPUs: %q is not a CPU list such as 1 or 0,2-3", c.KafkaCPUs)
	}
	if c.KafkaHeapMB < 0 {
		return fmt.Errorf("bench: LocalConfig.KafkaHeapMB: must be positive, got %d", c.KafkaHeapMB)
	}
	return nil
}

// validVersion reports whether v looks like a Kafka version: digits and
// dots, e.g. 4.4.0.
func validVersion(v string) bool {
	if v == "" || strings.Trim(v, "0123456789.") != "" || strings.HasPrefix(v, ".") || strings.HasSuffix(v, ".") {
		return false
	}
	return strings.Contains(v, ".")
}

// StartLocal starts what is missing: a pgtemp cluster with fsync on (the
// realistic setting) when cfg.DSN is empty, the broker cfg.Kafka names
// when cfg.Brokers is empty. Close stops what it started. The throwaway
// cluster spaces checkpoints out (max_wal_size 8GB, checkpoint_timeout
// 30min): the suite writes about a million rows, and a checkpoint landing
// in one mode's run by chance would skew the comparison between modes.
func StartLocal(ctx context.Context, cfg LocalConfig) (*Local, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	l := &Local{DSN: cfg.DSN, Brokers: cfg.Brokers}
	if cfg.DSN == "" {
		c, err := pgtemp.Start(ctx, pgtemp.Options{Fsync: true, ExtraConf: map[string]string{
			"max_wal_size": "8GB", "checkpoint_timeout": "30min",
		}})
		if err != nil {
			return nil, err
		}
		l.pg, l.DSN = c, c.DSN()
	}
	switch {
	case len(cfg.Brokers) > 0:
	case cfg.Kafka == KafkaKfake:
		// The broker listens through faultnet so that the broker-down
		// scenario can refuse connections on the same address.
		ln, err := faultnet.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			l.Close()
			return nil, fmt.Errorf("bench: kfake listener: %w", err)
		}
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(),
			kfake.ListenFn(func(network, addr string) (net.Listener, error) { return ln, nil }))
		if err != nil {
			_ = ln.Close()
			l.Close()
			return nil, fmt.Errorf("bench: kfake: %w", err)
		}
		l.kafka, l.ln, l.Brokers = c, ln, c.ListenAddrs()
	default:
		if err := l.startReal(ctx, cfg); err != nil {
			l.Close()
			return nil, err
		}
	}
	return l, nil
}

// startReal starts one real broker of cfg.Kafka and warms it up.
func (l *Local) startReal(ctx context.Context, cfg LocalConfig) error {
	began := time.Now()
	c, err := kafkatemp.Start(ctx, kafkatemp.Options{Version: cfg.Kafka, HeapMB: cfg.KafkaHeapMB, CPUs: cfg.KafkaCPUs})
	if err != nil {
		return fmt.Errorf("bench: start Kafka %s: %w", cfg.Kafka, err)
	}
	l.real, l.Brokers = c, c.Brokers()
	cfg.Log.Info("kafka broker started", zap.String("version", c.Version()), zap.Strings("brokers", l.Brokers),
		zap.Int("pid", c.Node(1).PID()), zap.Duration("took", time.Since(began).Round(100*time.Millisecond)))
	if cfg.KafkaWarmup > 0 {
		w, err := warmBroker(ctx, l.Brokers, cfg.KafkaWarmup, cfg.Log)
		if err != nil {
			return err
		}
		l.Warmup = w
	}
	return nil
}

// Kfake reports whether the broker is the in-process kfake cluster.
func (l *Local) Kfake() bool { return l.kafka != nil }

// Broker describes the broker for the report: "kfake", "Apache Kafka
// 4.4.0" (a real broker StartLocal started) or "external".
func (l *Local) Broker() string {
	switch {
	case l.kafka != nil:
		return KafkaKfake
	case l.real != nil:
		return "Apache Kafka " + l.real.Version()
	}
	return "external"
}

// BrokerJVMFlags returns the real broker's JVM options (nil for kfake and
// external brokers).
func (l *Local) BrokerJVMFlags() []string {
	if l.real == nil {
		return nil
	}
	return l.real.JVMFlags()
}

// BrokerCPUs returns the CPUs the real broker is pinned to ("" for none).
func (l *Local) BrokerCPUs() string {
	if l.real == nil {
		return ""
	}
	return l.real.CPUs()
}

// BrokerPID returns the PID of the real broker's JVM now (it changes when
// broker-down restarts it), 0 when none runs: Env.BrokerPID.
func (l *Local) BrokerPID() int {
	if l.real == nil {
		return 0
	}
	return l.real.Node(1).PID()
}

// CanTakeBrokerDown reports whether SetBrokerUp works: the broker is one
// StartLocal started.
func (l *Local) CanTakeBrokerDown() bool { return l.ln != nil || l.real != nil }

// BrokerOutage says how SetBrokerUp(false) takes the broker down:
// OutageRefused (kfake) or OutageKilled (a real broker).
func (l *Local) BrokerOutage() string {
	if l.real != nil {
		return OutageKilled
	}
	return OutageRefused
}

// SetBrokerUp makes the broker reachable (true) or takes it down (false):
// the in-process broker closes and refuses every connection; a real
// broker is killed with SIGKILL (a crash: no controlled shutdown, its
// listener gone) and, on true, started again with its data, returning
// once it answers metadata requests (after log recovery: seconds). A
// broker that is up stays up. A no-op with external brokers.
func (l *Local) SetBrokerUp(ctx context.Context, up bool) error {
	switch {
	case l.ln != nil:
		if up {
			l.ln.SetMode(faultnet.Up)
		} else {
			l.ln.SetMode(faultnet.Refuse)
		}
	case l.real != nil:
		n := l.real.Node(1)
		if !up {
			return n.Kill()
		}
		if n.Running() {
			return nil
		}
		if err := n.Start(ctx); err != nil {
			return fmt.Errorf("bench: restart the broker: %w", err)
		}
	}
	return nil
}

// Pgtemp reports whether Postgres is a throwaway pgtemp cluster.
func (l *Local) Pgtemp() bool { return l.pg != nil }

// Close stops the broker and the cluster that StartLocal started.
func (l *Local) Close() error {
	var err error
	if l.kafka != nil {
		l.kafka.Close()
		l.kafka = nil
	}
	if l.real != nil {
		err = l.real.Close()
		l.real = nil
	}
	if l.pg != nil {
		if e := l.pg.Stop(); e != nil && err == nil {
			err = e
		}
		l.pg = nil
	}
	return err
}

// runDB is one run's schema.
type runDB struct {
	Schema string
	// Config is a pool config whose connections use only Schema, named
	// writersApp.
	Config *pgxpool.Config
	// Pool is for the writers (MaxConns as asked).
	Pool *pgxpool.Pool
	// writersApp and relayApp are the application_name of the writers'
	// connections and of the relays' (in-process pools and relay
	// processes), so that the cost probe can find their server processes.
	writersApp, relayApp string
	env                  *Env
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// freshDB creates a schema with the outbox table and returns a pool on it
// with maxConns connections at most.
func (e *Env) freshDB(ctx context.Context, maxConns int32) (*runDB, error) {
	schema := "outbox_bench_" + randHex(4)
	conn, err := pgx.Connect(ctx, e.DSN)
	if err != nil {
		return nil, fmt.Errorf("bench: connect: %w", err)
	}
	_, err = conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	conn.Close(context.Background())
	if err != nil {
		return nil, fmt.Errorf("bench: create schema: %w", err)
	}
	db := &runDB{Schema: schema, env: e, writersApp: "outbox-bench-writers-" + schema, relayApp: "outbox-bench-relay-" + schema}
	cfg, err := pgxpool.ParseConfig(e.DSN)
	if err != nil {
		db.drop()
		return nil, fmt.Errorf("bench: parse database URL: %w", err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.ConnConfig.RuntimeParams["application_name"] = db.writersApp
	delete(cfg.ConnConfig.RuntimeParams, "options")
	db.Config = cfg
	if db.Pool, err = db.NewPool(ctx, maxConns); err != nil {
		db.drop()
		return nil, err
	}
	if _, err := outboxsql.Migrate(ctx, db.Pool); err != nil {
		db.Close()
		return nil, fmt.Errorf("bench: %w", err)
	}
	return db, nil
}

// NewPool opens another pool on the run's schema (connections named
// writersApp).
func (db *runDB) NewPool(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	return db.newPoolApp(ctx, maxConns, db.writersApp)
}

// newPoolApp opens a pool on the run's schema whose connections are named
// app.
func (db *runDB) newPoolApp(ctx context.Context, maxConns int32, app string) (*pgxpool.Pool, error) {
	cfg := db.Config.Copy()
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	cfg.MaxConns = maxConns
	cfg.MinConns = 0
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("bench: connect: %w", err)
	}
	return p, nil
}

// ConnectFunc opens a dedicated connection on the run's schema (for the
// notify listener).
func (db *runDB) ConnectFunc() func(ctx context.Context) (*pgx.Conn, error) {
	cc := db.Config.ConnConfig
	return func(ctx context.Context) (*pgx.Conn, error) { return pgx.ConnectConfig(ctx, cc.Copy()) }
}

// Close closes the pool and drops the schema.
func (db *runDB) Close() {
	if db.Pool != nil {
		db.Pool.Close()
	}
	db.drop()
}

func (db *runDB) drop() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, db.env.DSN)
	if err != nil {
		db.env.Log.Warn("drop schema: connect", zap.Error(err))
		return
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{db.Schema}.Sanitize()+" CASCADE"); err != nil {
		db.env.Log.Warn("drop schema", zap.String("schema", db.Schema), zap.Error(err))
	}
}

// dropTopic deletes topic (best effort), so that an in-process broker
// does not keep every earlier run's records in this process's memory.
func (e *Env) dropTopic(topic string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.Brokers...))
	if err != nil {
		return
	}
	defer cl.Close()
	req := kmsg.NewPtrDeleteTopicsRequest()
	req.TimeoutMillis = 10000
	req.TopicNames = []string{topic}
	rt := kmsg.NewDeleteTopicsRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	if _, err := req.RequestWith(ctx, cl); err != nil {
		e.Log.Warn("delete topic", zap.String("topic", topic), zap.Error(err))
	}
}

// freshTopic creates a new topic and waits until each partition has a
// leader.
func (e *Env) freshTopic(ctx context.Context, prefix string) (string, error) {
	name := "outbox-bench-" + strings.ReplaceAll(prefix, "_", "-") + "-" + randHex(4)
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.Brokers...))
	if err != nil {
		return "", fmt.Errorf("bench: kafka client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic = name
	rt.NumPartitions = e.Partitions
	rt.ReplicationFactor = -1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return "", fmt.Errorf("bench: create topic %s: %w", name, err)
	}
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return "", fmt.Errorf("bench: create topic %s: %w", name, err)
		}
	}
	for {
		mreq := kmsg.NewPtrMetadataRequest()
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(name)
		mreq.Topics = append(mreq.Topics, mt)
		mresp, err := mreq.RequestWith(ctx, cl)
		if err == nil && len(mresp.Topics) == 1 && mresp.Topics[0].ErrorCode == 0 && len(mresp.Topics[0].Partitions) == int(e.Partitions) {
			ok := true
			for _, p := range mresp.Topics[0].Partitions {
				if p.Leader < 0 || p.ErrorCode != 0 {
					ok = false
				}
			}
			if ok {
				return name, nil
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("bench: topic %s not ready: %w", name, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
