package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/peterbourgon/ff/v3"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sync/errgroup"

	"github.com/pgoutbox/outbox/internal/kafkatemp"
	"github.com/pgoutbox/outbox/internal/metrics"
	"github.com/pgoutbox/outbox/internal/pgtemp"
	"github.com/pgoutbox/outbox/kafka"
	"github.com/pgoutbox/outbox/lease"
	"github.com/pgoutbox/outbox/relay"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

// usageError is a bad flag or value (exit code 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

func isUsage(err error) bool {
	var ue usageError
	return errors.As(err, &ue)
}

// options are outbox-dev's flags.
type options struct {
	// databaseURL and brokers come from the command line only, never from
	// the environment: a shell set up for the real relay (DATABASE_URL,
	// OUTBOX_BROKERS) must not get sample events written into it.
	databaseURL string
	brokers     string
	// ignoredEnv are the variables that were set but not used for them.
	ignoredEnv []string
	// kafka is the broker to start without --brokers: kafkaEmbedded, or an
	// Apache Kafka version for a real broker (internal/kafkatemp).
	kafka      string
	brokerPort int
	// metricsPort is the port of /metrics, /healthz and /readyz on
	// 127.0.0.1; 0 means a free one.
	metricsPort int
	topic       string
	rate        float64
	noSample    bool
	logFormat   string
	logLevel    string
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	var o options
	fs := flag.NewFlagSet("outbox-dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `outbox-dev runs a development outbox stack: PostgreSQL, a Kafka-protocol
broker, the relay and a writer of sample payment events. Without
--database-url on the command line it starts a throwaway PostgreSQL
cluster; without --brokers on the command line an embedded broker on
127.0.0.1:--broker-port, or with --kafka 4.4.0 (or 3.9.1) a real Apache
Kafka broker on a free port (java and mvn needed; the jars come from
Maven Central once). The relay's /metrics, /healthz and /readyz are on
127.0.0.1:--metrics-port. Ctrl-C stops everything.
The other flags can also be set as OUTBOX_<FLAG_NAME>; DATABASE_URL,
OUTBOX_DATABASE_URL and OUTBOX_BROKERS are ignored, so that sample events
never go to a database or cluster by accident.

Flags:
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.databaseURL, "database-url", "",
		"PostgreSQL URL to write sample events into instead of a throwaway cluster (command line only: DATABASE_URL and OUTBOX_DATABASE_URL are ignored)")
	fs.StringVar(&o.brokers, "brokers", "",
		"Kafka brokers to use instead of the embedded one, comma-separated host:port (command line only: OUTBOX_BROKERS is ignored)")
	fs.StringVar(&o.kafka, "kafka", kafkaEmbedded,
		"the broker to start when --brokers is empty: kfake (embedded, in memory, starts at once) or an Apache Kafka version, "+strings.Join(kafkatemp.Versions, " or ")+" (a real throwaway broker on a free port, started in about 10 s; needs java and mvn)")
	fs.IntVar(&o.brokerPort, "broker-port", 9092, "port of the embedded broker on 127.0.0.1 (when --brokers is empty and --kafka is kfake)")
	fs.IntVar(&o.metricsPort, "metrics-port", 0, "port of /metrics, /healthz and /readyz on 127.0.0.1, as outbox-relay run serves them on --metrics-addr (0: a free port, printed)")
	fs.StringVar(&o.topic, "topic", "payments", "Kafka topic of the events")
	fs.Float64Var(&o.rate, "rate", 2, "sample events written per second")
	fs.BoolVar(&o.noSample, "no-sample", false, "do not write sample events (relay only)")
	fs.StringVar(&o.logFormat, "log-format", "console", "log format of the components (stderr): console or json")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	// The command line first, to know which flags it set; then the
	// environment for the others.
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, usageError{err}
	}
	if fs.NArg() > 0 {
		return nil, usagef("unexpected argument %q", fs.Arg(0))
	}
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	if err := ff.Parse(fs, nil, ff.WithEnvVarPrefix("OUTBOX")); err != nil {
		return nil, usageError{err}
	}
	if !explicit["database-url"] {
		o.databaseURL = ""
		o.ignoredEnv = append(o.ignoredEnv, setEnv("DATABASE_URL", "OUTBOX_DATABASE_URL")...)
	}
	if !explicit["brokers"] {
		o.brokers = ""
		o.ignoredEnv = append(o.ignoredEnv, setEnv("OUTBOX_BROKERS")...)
	}
	if !o.noSample && !(o.rate > 0 && o.rate <= 10000) {
		return nil, usagef("--rate: must be more than 0 and at most 10000 events per second, got %v", o.rate)
	}
	if o.brokers == "" && (o.brokerPort < 1 || o.brokerPort > 65535) {
		return nil, usagef("--broker-port: %d is not a TCP port (1..65535)", o.brokerPort)
	}
	if o.kafka != kafkaEmbedded {
		switch {
		case !slices.Contains(kafkatemp.Versions, o.kafka):
			return nil, usagef("--kafka: %q is not kfake or one of the tested Kafka versions %s", o.kafka, strings.Join(kafkatemp.Versions, ", "))
		case o.brokers != "":
			return nil, usagef("--kafka: %s starts a broker; --brokers names one: give only one of them", o.kafka)
		case explicit["broker-port"]:
			return nil, usagef("--broker-port: applies to the embedded broker; the real one (--kafka %s) listens on a free port, printed at start", o.kafka)
		}
	}
	if o.metricsPort < 0 || o.metricsPort > 65535 {
		return nil, usagef("--metrics-port: %d is not a TCP port (0..65535; 0: a free one)", o.metricsPort)
	}
	if o.topic == "" {
		return nil, usagef("--topic: required")
	}
	return &o, nil
}

// setEnv returns the names among names of the environment variables that
// are set and not empty.
func setEnv(names ...string) []string {
	var set []string
	for _, n := range names {
		if os.Getenv(n) != "" {
			set = append(set, n)
		}
	}
	return set
}

func (o *options) logger(stderr io.Writer) (*zap.Logger, error) {
	level, err := zapcore.ParseLevel(o.logLevel)
	if err != nil {
		return nil, usagef("--log-level: %q is not one of debug, info, warn, error", o.logLevel)
	}
	var enc zapcore.Encoder
	switch o.logFormat {
	case "console":
		ec := zap.NewDevelopmentEncoderConfig()
		ec.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
		enc = zapcore.NewConsoleEncoder(ec)
	case "json":
		ec := zap.NewProductionEncoderConfig()
		ec.EncodeTime = zapcore.ISO8601TimeEncoder
		enc = zapcore.NewJSONEncoder(ec)
	default:
		return nil, usagef("--log-format: %q is not console or json", o.logFormat)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(stderr)), level)).Named("outbox-dev"), nil
}

// run is the whole command: it returns nil after a clean stop (ctx done),
// flag.ErrHelp for --help, a usageError for bad flags, or why the stack
// could not start. stdout gets the user-facing lines, stderr the logs.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	log, err := o.logger(stderr)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	// A closed stdout (`make run | head`) stops everything cleanly instead
	// of leaving the throwaway cluster behind (main ignores SIGPIPE).
	ctx, stopOnBrokenStdout := context.WithCancel(ctx)
	defer stopOnBrokenStdout()
	out := &lockedWriter{w: stdout, onError: func(err error) {
		log.Warn("stdout is closed; stopping", zap.Error(err))
		stopOnBrokenStdout()
	}}

	o.printIgnoredEnv(out)
	// The broker first: a taken port fails in milliseconds, before initdb.
	var brokers []string
	var real *kafkatemp.Cluster
	switch {
	case o.brokers == "" && o.kafka != kafkaEmbedded:
		out.printf("starting a throwaway Apache Kafka %s broker (internal/kafkatemp)...\n", o.kafka)
		real, err = startRealBroker(ctx, o.kafka, o.topic)
		if err != nil {
			if ctx.Err() != nil {
				return nil // interrupted during start-up
			}
			return err
		}
		defer func() {
			dir := real.Dir()
			if err := real.Close(); err != nil {
				log.Error("stop the Kafka broker", zap.Error(err))
				out.printf("could not stop the Kafka broker in %s: %v\n", dir, err)
				return
			}
			out.printf("Kafka broker stopped, %s removed\n", dir)
		}()
		brokers = real.Brokers()
		log.Info("kafka broker started", zap.String("version", real.Version()), zap.Strings("brokers", brokers), zap.String("dir", real.Dir()))
	case o.brokers == "":
		cluster, err := startBroker(o.brokerPort, o.topic)
		if err != nil {
			return err
		}
		defer func() {
			cluster.Close()
			out.printf("embedded broker closed\n")
		}()
		brokers = cluster.ListenAddrs()
		log.Info("embedded kafka broker started", zap.Strings("brokers", brokers))
	default:
		for _, b := range strings.Split(o.brokers, ",") {
			if b = strings.TrimSpace(b); b == "" || !strings.Contains(b, ":") {
				return usagef("--brokers: %q is not host:port", b)
			}
			brokers = append(brokers, b)
		}
	}

	// The metrics port too: a taken one fails before initdb.
	metricsLn, err := listenMetrics(o.metricsPort)
	if err != nil {
		return err
	}
	defer metricsLn.Close()

	dsn := o.databaseURL
	var pg *pgtemp.Cluster
	if dsn == "" {
		out.printf("starting a throwaway PostgreSQL cluster (initdb)...\n")
		pg, err = pgtemp.Start(ctx, pgtemp.Options{})
		if err != nil {
			if ctx.Err() != nil {
				return nil // interrupted during start-up
			}
			return fmt.Errorf("start throwaway PostgreSQL (pass --database-url to use an existing database): %w", err)
		}
		onKill.set(func() { _ = pg.Stop() })
		defer func() {
			// A second signal meanwhile calls pg.Stop too, which waits
			// for this one: the hook stays set until the cluster is gone.
			defer onKill.set(nil)
			if err := pg.Stop(); err != nil {
				log.Error("stop throwaway PostgreSQL", zap.Error(err))
				out.printf("could not remove the throwaway PostgreSQL cluster in %s: %v\n", pg.Dir(), err)
				return
			}
			out.printf("throwaway PostgreSQL stopped, %s removed\n", pg.Dir())
		}()
		dsn = pg.DSN()
		log.Info("throwaway postgresql started", zap.String("dir", pg.Dir()), zap.Int("port", pg.Port()))
	}

	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return usagef("--database-url: not a valid PostgreSQL URL or DSN")
	}
	if pcfg.MaxConns < 4 {
		pcfg.MaxConns = 4
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer pool.Close()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = pool.Ping(pctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	applied, err := outboxsql.Migrate(ctx, pool)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("migrate: %w", err)
	}
	for _, r := range applied {
		log.Info("migration applied", zap.String("name", r.Name))
	}

	// The relay's metrics and health endpoints, as outbox-relay run serves
	// them (without its listener-state and retention metrics).
	m, err := metrics.New(metrics.Config{DefaultTopic: o.topic, Topics: []string{o.topic}}, pool, log)
	if err != nil {
		return err
	}
	lat := newLatencies(out)
	svc, err := relay.NewService(pool, relay.ServiceConfig{
		Relay: relay.Config{Topic: o.topic, ShutdownTimeout: 5 * time.Second,
			Observer: relay.Observers(m, relay.ObserverFuncs{OnPublished: lat.published})},
		Lease: lease.Config{RelayID: "outbox-dev"},
		Kafka: kafka.Config{
			Brokers:         brokers,
			ClientID:        "outbox-dev",
			AutoCreateTopic: true, // external dev brokers usually allow it
			// As outbox-relay run's default (--kafka-idempotent).
			Idempotent: true,
		},
	}, log)
	if err != nil {
		return usagef("--brokers/--topic: %v", err)
	}
	defer svc.Close()
	kctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	err = svc.Publisher().Ping(kctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("connect to Kafka at %s: %w", strings.Join(brokers, ","), err)
	}

	m.Attach(metrics.Components{Relay: svc.Relay(), Listener: svc.Listener(), Broker: svc.Publisher()})

	printBanner(out, o, pg, real, pcfg, brokers, metricsLn.Addr().String())

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return svc.Run(gctx) })
	context.AfterFunc(gctx, m.SetStopping)
	g.Go(func() error { return m.RunRefresher(gctx) })
	g.Go(func() error {
		if err := m.Serve(gctx, metricsLn); err != nil && gctx.Err() == nil {
			return fmt.Errorf("metrics server on %s: %w", metricsLn.Addr(), err)
		}
		return nil
	})
	var written int64
	if !o.noSample {
		g.Go(func() error {
			written = writeSamples(gctx, pool, o.rate, lat, log.Named("samples"))
			return nil
		})
	}
	err = g.Wait()
	s := svc.Relay().Stats()
	out.printf("stopped: %d sample events written, %d events published by this relay\n", written, s.Published)
	if s.Published < written {
		// Another relay on the same table (an outside --database-url)
		// publishes its share of the key partitions: the rest is theirs,
		// or still to be published.
		out.printf("(the others are published by other relays on the table, which own their key partitions, or by the next relay to start; `outbox-relay status` shows what is left)\n")
	}
	return err
}

// startBroker starts the embedded one-broker kfake cluster on
// 127.0.0.1:port with topic pre-created (3 partitions).
func startBroker(port int, topic string) (*kfake.Cluster, error) {
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.Ports(port),
		kfake.SeedTopics(3, topic),
		kfake.AllowAutoTopicCreation(),
		kfake.ClusterID("outbox-dev"),
	)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, usagef("embedded broker: port %d on 127.0.0.1 is already in use (another Kafka running?): "+
				"pass --broker-port to use another port, or --brokers %s to use that broker", port, fmt.Sprintf("localhost:%d", port))
		}
		return nil, fmt.Errorf("start embedded broker on 127.0.0.1:%d: %w", port, err)
	}
	return c, nil
}

// kafkaEmbedded is --kafka's value for the embedded kfake broker.
const kafkaEmbedded = "kfake"

// startRealBroker starts a throwaway Apache Kafka broker of version on a
// free loopback port (internal/kafkatemp, its fast-start JVM settings) and
// creates topic with 3 partitions, as the embedded broker has it.
func startRealBroker(ctx context.Context, version, topic string) (*kafkatemp.Cluster, error) {
	c, err := kafkatemp.Start(ctx, kafkatemp.Options{Version: version, FastStart: true})
	if err != nil {
		return nil, fmt.Errorf("start Apache Kafka %s (or use the embedded broker: leave out --kafka): %w", version, err)
	}
	if err := createTopic(ctx, c.Brokers(), topic, 3); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// createTopic creates topic on brokers (replication factor: the
// broker's default) unless it exists, and waits until its partitions have
// leaders.
func createTopic(ctx context.Context, brokers []string, topic string, partitions int32) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, partitions, -1, nil, topic); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	for {
		md, err := adm.Metadata(ctx, topic)
		if err == nil {
			if t, ok := md.Topics[topic]; ok && t.Err == nil && len(t.Partitions) == int(partitions) {
				ready := true
				for _, p := range t.Partitions {
					ready = ready && p.Leader >= 0
				}
				if ready {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("create topic %s: not ready: %w", topic, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// listenMetrics listens on 127.0.0.1:port (0: a free port) for the
// metrics server; a port in use is a usage error naming the flag.
func listenMetrics(port int) (net.Listener, error) {
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, usagef("--metrics-port: port %d on 127.0.0.1 is already in use (a relay's --metrics-addr?): pass another --metrics-port, or 0 for a free one", port)
		}
		return nil, fmt.Errorf("metrics server: listen on 127.0.0.1:%d: %w", port, err)
	}
	return ln, nil
}

// printIgnoredEnv says which variables were set but not used for the
// database or the brokers, and how to use them.
func (o *options) printIgnoredEnv(out *lockedWriter) {
	var db, kafka []string
	for _, v := range o.ignoredEnv {
		if v == "OUTBOX_BROKERS" {
			kafka = append(kafka, v)
		} else {
			db = append(db, v)
		}
	}
	if len(db) > 0 {
		verb := "is"
		if len(db) > 1 {
			verb = "are"
		}
		out.printf("%s %s set but not used: sample events go to a throwaway PostgreSQL cluster unless --database-url is given on the command line\n",
			strings.Join(db, ", "), verb)
	}
	if len(kafka) > 0 {
		out.printf("OUTBOX_BROKERS is set but not used: sample events go to the embedded broker unless --brokers is given on the command line\n")
	}
}

// printBanner says where everything runs and the commands that look at it:
// kcat, psql, the relay's endpoints (metricsAddr) and `outbox-relay
// status`. pcfg is the database the samples are written into: its host,
// port and name are printed, never its password.
func printBanner(out *lockedWriter, o *options, pg *pgtemp.Cluster, real *kafkatemp.Cluster, pcfg *pgxpool.Config, brokers []string, metricsAddr string) {
	dsn := pcfg.ConnString()
	shownDSN := redactURL(dsn)
	out.printf("\n")
	if pg != nil {
		out.printf("PostgreSQL (throwaway, removed on exit): %s\n", pg.Dir())
		out.printf("  DATABASE_URL=%s\n", dsn)
	} else {
		out.printf("PostgreSQL: %s\n", shownDSN)
	}
	kb := brokers[0]
	switch {
	case real != nil:
		out.printf("Kafka (Apache Kafka %s, throwaway, removed on exit): %s\n", real.Version(), strings.Join(brokers, ","))
		out.printf("  its log: %s\n", real.Node(1).LogPath())
	case o.brokers == "":
		out.printf("Kafka (embedded, in memory): %s\n", strings.Join(brokers, ","))
		kb = fmt.Sprintf("localhost:%d", o.brokerPort)
	default:
		out.printf("Kafka: %s\n", strings.Join(brokers, ","))
	}
	out.printf("Topic: %s\n\n", o.topic)
	out.printf("Watch the events:\n  kcat -b %s -t %s -C -o beginning -f 'key=%%k headers=%%h value=%%s\\n'\n", kb, o.topic)
	out.printf("Look at the table:\n  psql '%s' -c 'SELECT seq, aggregate_id, event_type, published_at FROM outbox ORDER BY seq DESC LIMIT 10'\n", shownDSN)
	statusDSN := shownDSN
	if pg != nil {
		statusDSN = dsn // the throwaway cluster has no password
	}
	out.printf("Ask the relay's questions:\n  %s status --database-url '%s'\n", relayCommand(), statusDSN)
	out.printf("The relay's metrics and health, as outbox-relay run serves them on --metrics-addr:\n  curl http://%s/metrics\n  curl http://%s/healthz\n  curl http://%s/readyz\n\n", metricsAddr, metricsAddr, metricsAddr)
	db := fmt.Sprintf("database %q at %s:%d (--database-url)", pcfg.ConnConfig.Database, pcfg.ConnConfig.Host, pcfg.ConnConfig.Port)
	if pg != nil {
		db = fmt.Sprintf("database %q at %s:%d (throwaway)", pcfg.ConnConfig.Database, pcfg.ConnConfig.Host, pcfg.ConnConfig.Port)
	}
	if o.noSample {
		out.printf("relay running on %s (no sample events); Ctrl-C to stop\n", db)
	} else {
		out.printf("writing %v sample payment events per second into %s; Ctrl-C to stop\n", o.rate, db)
		out.printf("%s\n", latencyLegend)
	}
}

// latencyLegend says which latency the "published" lines show, and how it
// differs from the one `outbox-relay inspect` shows.
const latencyLegend = "each \"published\" line gives its commit-to-publish latency: from the writer's COMMIT returning to Kafka's\n" +
	"acknowledgement (acks=all), both by this process's clock (outbox-relay inspect shows another one:\n" +
	"created_at, the writing transaction's start, to published_at, the relay's mark after the ack)"

// redactURL hides the password of a postgres:// URL.
func redactURL(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		if strings.Contains(dsn, "password") {
			return "<connection string with password>"
		}
		return dsn
	}
	return u.Redacted()
}

// lockedWriter serializes whole lines from several goroutines.
// onError is called once, on the first failed write.
type lockedWriter struct {
	mu      sync.Mutex
	w       io.Writer
	onError func(error)
	failed  bool
}

func (l *lockedWriter) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failed {
		return
	}
	if _, err := fmt.Fprintf(l.w, format, args...); err != nil {
		l.failed = true
		if l.onError != nil {
			l.onError(err)
		}
	}
}

// relayCommand is how the printed outbox-relay commands run it:
// ./bin/outbox-relay where make run (or make build) put it, else go run
// from the repository.
func relayCommand() string {
	if fi, err := os.Stat(filepath.Join("bin", "outbox-relay")); err == nil && !fi.IsDir() {
		return "./bin/outbox-relay"
	}
	return "go run ./cmd/outbox-relay"
}
