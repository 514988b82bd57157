package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go/sasl/scram"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/metrics"
	"github.com/pgoutbox/outbox/internal/sqladmin"
	"github.com/pgoutbox/outbox/kafka"
	"github.com/pgoutbox/outbox/kafka/format"
	"github.com/pgoutbox/outbox/lease"
	"github.com/pgoutbox/outbox/notify"
	"github.com/pgoutbox/outbox/relay"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

// runFlags are the flags of `outbox-relay run`.
type runFlags struct {
	commonFlags
	tableFlags  // --table, --debezium, --column-*, --topic, --topic-template (flags.go)
	brokers     string
	kafka       kafka.Config
	relay       relay.Config
	lease       lease.Config
	notify      notify.Config
	noNotify    bool
	listenURL   string // --listen-database-url; "" means --database-url's
	startupWait time.Duration
	observe     observeFlags // metrics server, retention (observe.go)
}

// runTopicUsage is run's --topic usage.
const runTopicUsage = "Kafka topic for events whose topic column is NULL and that --topic-template does not route (required; the topic must exist unless --kafka-auto-create-topics)"

func (f *runFlags) register(fsName string, stdout io.Writer) *flagSet {
	fs := newFlagSet(fsName, stdout)
	f.commonFlags.register(fs)
	f.tableFlags.register(fs, runTopicUsage)
	fs.StringVar(&f.brokers, "brokers", "", "Kafka bootstrap brokers, comma-separated host:port (required)")
	fs.StringVar(&f.notify.Channel, "channel", outbox.DefaultChannel, "Postgres NOTIFY channel to LISTEN on (must match the writers')")
	fs.BoolVar(&f.noNotify, "no-notify", false, "do not LISTEN: find events by polling only")
	fs.StringVar(&f.listenURL, "listen-database-url", "", "PostgreSQL URL or DSN of the LISTEN connection only, when --database-url goes through a transaction pooler (PgBouncer pool_mode=transaction), which cannot carry LISTEN: connect the listener to PostgreSQL directly (default: --database-url)")
	fs.DurationVar(&f.lease.Lease, "lease", lease.DefaultLease, "how long a claim holds its rows before another relay may take them (min 1s)")
	fs.IntVar(&f.lease.BatchSize, "batch-size", lease.DefaultBatchSize, fmt.Sprintf("most events per claim (1..%d)", lease.MaxBatchSize))
	fs.Int64Var(&f.lease.MaxBatchBytes, "max-batch-bytes", lease.DefaultMaxBatchBytes, fmt.Sprintf("most payload bytes per claim, as recorded at insert (a claim always takes one event, however large); the relay holds at most three claims, so this bounds its memory (1..%d)", lease.MaxMaxBatchBytes))
	fs.StringVar(&f.lease.RelayID, "relay-id", "", "name of this relay in locked_by (default <hostname>-<random>)")
	fs.StringVar(&f.relay.IDHeader, "id-header", "", "also carry the event ID in this header (Debezium's router uses id; default: only event_id)")
	fs.DurationVar(&f.relay.PollInterval, "poll-interval", relay.DefaultPollInterval, "fallback poll interval when no notification arrives (jittered ±10%); several listening relays take turns, so the table is polled once per interval between them")
	fs.DurationVar(&f.relay.ClaimWindow, "claim-window", relay.DefaultClaimWindow, "after a claim found events, keep claiming every --claim-window-poll (doubling to 4x while empty) this long; must be >= the writers' wake-up interval (20ms) (negative, e.g. -1ms: off; 0 is refused)")
	fs.DurationVar(&f.relay.ClaimWindowPoll, "claim-window-poll", relay.DefaultClaimWindowPoll, "first interval between claims in the claim window")
	fs.DurationVar(&f.relay.BusyClaimInterval, "busy-claim-interval", relay.DefaultBusyClaimInterval, "interval between claims while events arrive at 2,000/s or more (shorter: lower latency at high rates, more CPU taken from the writers)")
	// The old names, read as before (a Kafka engineer reads "linger" as
	// the producer's linger.ms, which this is not).
	fs.Var(durationAlias{&f.relay.ClaimWindow}, "linger", "deprecated: --claim-window")
	fs.Var(durationAlias{&f.relay.ClaimWindowPoll}, "linger-poll", "deprecated: --claim-window-poll")
	fs.IntVar(&f.relay.MaxAttempts, "max-attempts", relay.DefaultMaxAttempts, "failed publishes answered by the broker before an event is dead-lettered (outages do not count)")
	f.relay.OnDeadLetter = relay.DeadLetterHold
	fs.Var(&f.relay.OnDeadLetter, "on-dead-letter", "later events of a dead-lettered event's aggregate: hold (keep order) or skip")
	fs.DurationVar(&f.relay.RetryMin, "retry-min", relay.DefaultRetryMin, "first retry delay of a failed event; doubles per attempt")
	fs.DurationVar(&f.relay.RetryMax, "retry-max", relay.DefaultRetryMax, "longest retry delay of a failed event")
	fs.DurationVar(&f.relay.ShutdownTimeout, "shutdown-timeout", relay.DefaultShutdownTimeout, "on SIGTERM, how long in-flight publishes may take before leases are released")
	fs.DurationVar(&f.relay.StallTimeout, "stall-timeout", relay.DefaultStallTimeout, "after this long without progress (every claim or mark failing, claimed events none of which is published or dead-lettered, or publishes the broker leaves unanswered) the relay logs one error, /readyz answers 503 naming the step, and outbox_relay_stalled is 1")
	fs.DurationVar(&f.startupWait, "startup-wait", 0, "how long to wait for Postgres and Kafka at start before giving up (0: forever)")
	fs.StringVar(&f.kafka.ClientID, "kafka-client-id", kafka.DefaultClientID, "Kafka client.id")
	fs.DurationVar(&f.kafka.WriteTimeout, "kafka-write-timeout", 0, fmt.Sprintf("timeout of one produce attempt; kafka-go makes up to %d, which with their backoffs must fit in half of --lease (default %s, less with a --lease under 26s: what fits; 0 is refused)", kafka.DefaultMaxAttempts, kafka.DefaultWriteTimeout))
	fs.DurationVar(&f.kafka.BatchTimeout, "kafka-batch-timeout", 0, "kafka-go Writer.BatchTimeout, with --kafka-idempotent=false only (0: the publisher's small default); the idempotent producer sends each publish at once")
	fs.BoolVar(&f.kafka.AutoCreateTopic, "kafka-auto-create-topics", false, "let metadata requests create missing topics on brokers that allow it (auto.create.topics.enable)")
	fs.BoolVar(&f.kafka.Idempotent, "kafka-idempotent", true, "idempotent producer: batches carry a producer ID and sequence, so a batch sent again after a timeout or a leader move is written once (Kafka's enable.idempotence); false: kafka-go's Writer")
	fs.BoolVar(&f.kafka.Fence, "kafka-fence", false, "write every batch in a Kafka transaction under this relay's transactional ID, and fence the former owner of key partitions taken over, so a paused relay's late writes are refused (consumers should read_committed); needs --kafka-idempotent")
	fs.StringVar(&f.kafka.TransactionalIDPrefix, "kafka-transactional-id-prefix", "", "with --kafka-fence: start of every relay's two transactional IDs, its member name and /0 or /1 follow (default pgoutbox/<table>/)")
	fs.StringVar((*string)(&f.kafka.Compression), "kafka-compression", "none", "compression: none, gzip, snappy, lz4 or zstd")
	fs.BoolVar(&f.kafka.TLSEnabled, "kafka-tls", false, "connect to Kafka over TLS")
	fs.StringVar(&f.kafka.TLSCAFile, "kafka-tls-ca", "", "PEM file of CA certificates for Kafka TLS (default: system roots)")
	fs.StringVar(&f.kafka.TLSCertFile, "kafka-tls-cert", "", "PEM client certificate for Kafka mTLS")
	fs.StringVar(&f.kafka.TLSKeyFile, "kafka-tls-key", "", "PEM client key for Kafka mTLS")
	fs.BoolVar(&f.kafka.TLSInsecureSkipVerify, "kafka-tls-insecure-skip-verify", false, "do not verify the broker's certificate (testing only)")
	fs.StringVar((*string)(&f.kafka.SASLMechanism), "kafka-sasl-mechanism", "", "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (default: none)")
	fs.StringVar(&f.kafka.SASLUsername, "kafka-sasl-username", "", "SASL user name")
	fs.StringVar(&f.kafka.SASLPassword, "kafka-sasl-password", "", "SASL password (prefer the env OUTBOX_KAFKA_SASL_PASSWORD)")
	registerFormat(fs, &f.relay.Format)
	fs.BoolVar(&f.relay.Format.CloudEvents, "cloudevents", false, "add the CloudEvents binary-mode headers (ce_specversion, ce_id, ce_source, ce_type, ce_time, ce_subject, content-type, and ce_dataschema with a registry format)")
	fs.StringVar(&f.relay.Format.CloudEventsSource, "cloudevents-source", format.DefaultCloudEventsSource, "ce_source of every event with --cloudevents")
	f.observe.register(fs)
	return (*flagSet)(fs)
}

// registerFormat registers the flags of the records' value format
// (format.Config, but CloudEvents) into fc: run's and inspect's.
func registerFormat(fs *flag.FlagSet, fc *format.Config) {
	fs.StringVar((*string)(&fc.Value), "value-format", string(format.DefaultValue), "record values: json (the payload as stored), or the payload encoded in its Schema Registry schema and framed in the Confluent wire format: avro, protobuf (the JSON mapping) or json-schema (validated, sent as JSON)")
	fs.StringVar(&fc.RegistryURL, "schema-registry-url", "", "Schema Registry base URL (Confluent REST API: Confluent, Karapace, Redpanda, Apicurio's /apis/ccompat/v7); needed by every --value-format but json")
	fs.StringVar(&fc.RegistryUsername, "schema-registry-username", "", "Schema Registry basic-auth user")
	fs.StringVar(&fc.RegistryPassword, "schema-registry-password", "", "Schema Registry basic-auth password (prefer the env OUTBOX_SCHEMA_REGISTRY_PASSWORD)")
	fs.StringVar(&fc.RegistryCAFile, "schema-registry-ca", "", "PEM file of CA certificates for an https Schema Registry (default: system roots)")
	fs.StringVar(&fc.RegistryCertFile, "schema-registry-cert", "", "PEM client certificate for Schema Registry mTLS")
	fs.StringVar(&fc.RegistryKeyFile, "schema-registry-key", "", "PEM client key for Schema Registry mTLS")
	fs.DurationVar(&fc.RegistryTimeout, "schema-registry-timeout", format.DefaultRegistryTimeout, "timeout of one Schema Registry request")
	fs.StringVar((*string)(&fc.SubjectStrategy), "subject-name-strategy", string(format.DefaultSubjectStrategy), "subject of an event's schema: topic (<topic>-value), record (<record>) or topic-record (<topic>-<record>); the record name is the value of --subject-record-header")
	fs.StringVar(&fc.RecordHeader, "subject-record-header", format.DefaultRecordHeader, "header whose value names an event's record for --subject-name-strategy record and topic-record (event_type, or one of the row's headers)")
	fs.IntVar(&fc.SchemaVersion, "schema-version", 0, "use this version of every subject (0: the latest, checked again every --schema-refresh)")
	fs.DurationVar(&fc.SchemaRefresh, "schema-refresh", format.DefaultSchemaRefresh, "how often the latest version of a subject in use is asked for again, in the background")
}

// validate maps each component's validation error onto its flag, and
// checks what would otherwise fail only later, after the database wait:
// broker addresses, the TLS files and the SASL credentials.
func (f *runFlags) validate() error {
	if f.brokers == "" {
		return usagef("--brokers: required, e.g. --brokers localhost:9092 (or set OUTBOX_BROKERS)")
	}
	for _, b := range strings.Split(f.brokers, ",") {
		b = strings.TrimSpace(b)
		if err := checkBroker(b); err != nil {
			return err
		}
		f.kafka.Brokers = append(f.kafka.Brokers, b)
	}
	f.relay.Topic = f.topic
	f.relay.TopicTemplate = f.template()
	f.kafka.Topic = f.relay.Topic
	f.lease.Table = f.table
	f.lease.Columns = f.columns()
	if f.debezium && f.relay.IDHeader == "" {
		f.relay.IDHeader = "id"
	}
	f.notify.ReconnectMin, f.notify.ReconnectMax = 0, 0
	if err := f.validateListen(); err != nil {
		return err
	}
	for _, err := range []error{f.lease.Validate(), f.relay.Validate(), f.notify.Validate(), f.kafka.Validate()} {
		if err != nil {
			return usageError{errors.New(flagError(err))}
		}
	}
	if f.relay.Topic == "" {
		return usagef("--topic: required, or set OUTBOX_TOPIC (events without a topic column need a destination)")
	}
	if err := checkKafkaFiles(&f.kafka); err != nil {
		return err
	}
	if err := checkSASL(&f.kafka); err != nil {
		return err
	}
	if err := f.observe.validate(f.table); err != nil {
		return err
	}
	if f.startupWait < 0 {
		return usagef("--startup-wait: must not be negative")
	}
	return nil
}

// checkBroker refuses a --brokers entry that is not host:port with a
// numeric port in 1..65535.
func checkBroker(b string) error {
	host, port, err := net.SplitHostPort(b)
	if b == "" || err != nil || host == "" || port == "" {
		return usagef("--brokers: %q is not host:port", b)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return usagef("--brokers: %q: the port %q is not a number from 1 to 65535", b, port)
	}
	return nil
}

// checkKafkaFiles reads the TLS files as the publisher will, so that a
// missing or unusable file is refused at start, naming its flag.
func checkKafkaFiles(c *kafka.Config) error {
	if !c.TLSEnabled {
		return nil
	}
	if c.TLSCAFile != "" {
		pem, err := os.ReadFile(c.TLSCAFile)
		if err != nil {
			return usagef("--kafka-tls-ca: %v", err)
		}
		if !x509.NewCertPool().AppendCertsFromPEM(pem) {
			return usagef("--kafka-tls-ca: %s: no PEM certificates", c.TLSCAFile)
		}
	}
	if c.TLSCertFile != "" {
		cert, err := os.ReadFile(c.TLSCertFile)
		if err != nil {
			return usagef("--kafka-tls-cert: %v", err)
		}
		key, err := os.ReadFile(c.TLSKeyFile)
		if err != nil {
			return usagef("--kafka-tls-key: %v", err)
		}
		if _, err := tls.X509KeyPair(cert, key); err != nil {
			switch msg := err.Error(); {
			case strings.Contains(msg, "certificate input"):
				return usagef("--kafka-tls-cert: %s: %v", c.TLSCertFile, err)
			case strings.Contains(msg, "key input") || strings.Contains(msg, "parse private key"):
				return usagef("--kafka-tls-key: %s: %v", c.TLSKeyFile, err)
			}
			return usagef("--kafka-tls-cert, --kafka-tls-key: %s, %s: %v", c.TLSCertFile, c.TLSKeyFile, err)
		}
	}
	return nil
}

// checkSASL prepares the SCRAM credentials as the publisher will (SASLprep
// refuses some characters), naming the flag; the password never appears in
// the message.
func checkSASL(c *kafka.Config) error {
	var algo scram.Algorithm
	switch kafka.SASLMechanism(strings.ToUpper(string(c.SASLMechanism))) {
	case kafka.SASLScramSHA256:
		algo = scram.SHA256
	case kafka.SASLScramSHA512:
		algo = scram.SHA512
	default:
		return nil
	}
	if _, err := scram.Mechanism(algo, c.SASLUsername, ""); err != nil {
		return usagef("--kafka-sasl-username: %v", err)
	}
	if _, err := scram.Mechanism(algo, "user", c.SASLPassword); err != nil {
		return usagef("--kafka-sasl-password: %v", err)
	}
	return nil
}

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f runFlags
	fs := f.register("run", stdout)
	from, err := parseArgs(fs.std(), args)
	if err != nil {
		return err
	}
	// A standby at start is an error unless --startup-wait says to wait
	// (then for a promotion).
	waitPromotion := from["startup-wait"] != ""
	log, err := f.logger(stderr)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	if err := f.validate(); err != nil {
		return err
	}
	if w := f.relay.ClaimWindow; w > 0 && w < outbox.DefaultWakeupInterval {
		// Events committed inside a debounced writer's wake-up interval
		// carry no notification: only the window's claims find them.
		log.Warn("--claim-window is shorter than the writers' default wake-up interval: with debounced writers (the default) an event committed in that interval after an earlier one waits for --poll-interval; use at least the interval, or writers with outbox.WakeupEveryTx",
			zap.Duration("claim_window", w), zap.Duration("writer_wakeup_interval", outbox.DefaultWakeupInterval), zap.Duration("poll_interval", f.relay.PollInterval))
	}
	// Spans still queued are exported after the relay stopped.
	tp, err := tracerFromEnv(ctx, log)
	if err != nil {
		return usageError{err}
	}
	if tp != nil {
		defer shutdownTracing(tp, log)
	}
	pcfg, err := f.poolConfig()
	if err != nil {
		return err
	}
	if pcfg.MaxConns < 4 {
		pcfg.MaxConns = 4
	}
	// idle_session_timeout off and statement_timeout no shorter than the
	// relay's own bound, for its sessions (docs/database.md).
	relay.ConfigurePool(pcfg, f.relay)

	startCtx := ctx
	if f.startupWait > 0 {
		var cancel context.CancelFunc
		startCtx, cancel = context.WithTimeout(ctx, f.startupWait)
		defer cancel()
	}

	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	// After a run, finish closes everything within exitGrace; before one
	// (an error at start), the defers do.
	finished := false
	defer func() {
		if !finished {
			pool.Close()
		}
	}()
	obs, err := startObserve(ctx, &f.observe, pool, f.table, f.lease.WithDefaults().Columns.AggregateID, f.relay.Topic, log)
	if err != nil {
		return err
	}
	defer func() {
		if !finished {
			obs.stop()
		}
	}()
	if err := f.databaseReady(ctx, startCtx, log, pool, waitPromotion, obs.m.SetStarting); err != nil {
		if ctx.Err() != nil {
			return nil // stopped while waiting
		}
		return err
	}

	f.relay.Observer = obs.m
	f.kafka.Observer = obs.m
	scfg := relay.ServiceConfig{
		Relay: f.relay, Lease: f.lease, Kafka: f.kafka, Notify: f.notify, NoNotify: f.noNotify,
		ListenConnString: f.listenURL,
		Privileges:       outboxsql.Needs{Retention: f.observe.retention >= 0, SnapshotWatch: true, TimePartitions: true},
	}
	if tp != nil {
		scfg.TracerProvider = tp
	}
	svc, err := relay.NewService(pool, scfg, log)
	if err != nil {
		return usageError{errors.New(flagError(err))}
	}
	defer func() {
		if !finished {
			_ = svc.Close()
		}
	}()
	if err := f.kafkaReady(ctx, startCtx, log, svc, obs.m.SetStarting); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if err := obs.attach(svc); err != nil {
		return err
	}
	if l := svc.Listener(); l != nil {
		obs.m.Registry().MustRegister(metrics.ListenerState(l))
	}
	f.logStart(log, svc)
	err = svc.Run(ctx)
	finished = true
	finish(log, exitGrace, func() { _ = svc.Close() }, obs.stop, pool.Close)
	return err
}

// exitGrace bounds what `run` does after the relay stopped (svc.Run
// returned: ShutdownTimeout plus relay.ShutdownGrace after SIGTERM at the
// latest): closing the publisher, the metrics server and the pool. With
// the database's connections frozen, pgxpool's Close waits for each
// broken connection's cancel request, up to 15 s; the process does not.
const exitGrace = 500 * time.Millisecond

// finish runs closers one after the other and waits for them at most
// within; what has not returned by then goes on until the process exits
// (its connections are closed with it: nothing is lost).
func finish(log *zap.Logger, within time.Duration, closers ...func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, c := range closers {
			c()
		}
	}()
	select {
	case <-done:
	case <-time.After(within):
		log.Debug("closing the connections did not finish; exiting anyway", zap.Duration("waited", within))
	}
}

// logStart logs the relay's start with its main settings.
func (f *runFlags) logStart(log *zap.Logger, svc *relay.Service) {
	lc := svc.Claimer().Config()
	log.Info("relay starting",
		zap.String("relay_id", lc.RelayID),
		zap.String("table", f.table),
		zap.String("topic", f.relay.Topic),
		zap.Strings("brokers", f.kafka.Brokers),
		zap.Bool("notify", !f.noNotify),
		zap.Bool("listen_database_url", f.listenURL != ""),
		zap.Duration("lease", lc.Lease),
		zap.Duration("poll_interval", f.relay.PollInterval),
		zap.Int("batch_size", lc.BatchSize),
		zap.Int64("max_batch_bytes", lc.MaxBatchBytes))
}

// checkTable fails fast, with a clear message, when the outbox table is
// missing or has the wrong shape.
func checkTable(ctx context.Context, pool *pgxpool.Pool, table string, columns ...lease.Columns) error {
	c := lease.Config{Table: table}
	if len(columns) > 0 {
		c.Columns = columns[0]
	}
	c = c.WithDefaults()
	check, err := renderCheckTable(table, c.Columns)
	if err != nil {
		return err
	}
	_, err = pool.Exec(ctx, check.SQL)
	switch {
	case err == nil:
		if err := checkOrderGuard(ctx, pool, table); err != nil {
			return err
		}
		err := claim.CheckPartitions(ctx, pool, table)
		switch {
		case errors.Is(err, claim.ErrNotMigrated):
			return fmt.Errorf("table %q has no key partitions yet: run `%s` (it adds them and fills them in; `outbox-relay adopt` for an adopted table)", table, migrateCommand(table))
		case isInsufficientPrivilege(err):
			// Insufficient privilege: the relay's start-up check names
			// every missing privilege in one line, the grants command
			// prints the fix; the relay starts and says it is not ready.
			return nil
		}
		return err
	case claim.IsMissingTable(err):
		if nameErr := sqladmin.CheckTableName(table); nameErr != nil {
			return fmt.Errorf("outbox table %q not found (%v); migrate cannot create it under this name (%v): use a plain lower-case name, or create the table and run `outbox-relay adopt --table %s`", table, err, nameErr, shellArg(table))
		}
		return fmt.Errorf("outbox table %q not found: run `%s` first (%v)", table, migrateCommand(table), err)
	case claim.IsSchemaMismatch(err):
		if flag, ok := columnFlag(err, c.Columns); ok {
			return fmt.Errorf("table %q has no column the relay was told to read: %v; it is named by %s: give every command the flags that name the table's columns (--debezium for a Debezium outbox table: id, aggregatetype, aggregateid, type, payload)", table, err, flag)
		}
		return fmt.Errorf("table %q is not an outbox table of this version: run `%s` (or `outbox-relay adopt` for an existing table such as Debezium's), and give every command the relay's --debezium or --column-* flags (%v)", table, migrateCommand(table), err)
	case isInsufficientPrivilege(err):
		return missingPrivilegesError(ctx, pool, table, err)
	}
	return fmt.Errorf("check outbox table %q: %w", table, err)
}

// undefinedColumnRE reads the column out of PostgreSQL's undefined_column
// message.
var undefinedColumnRE = regexp.MustCompile(`^column "(.+)" does not exist$`)

// columnFlag returns the flag that names the column err says is missing,
// when it is one of the configured event columns cols (a table read with
// the wrong --debezium or --column-* flags, not an unmigrated one).
func columnFlag(err error, cols lease.Columns) (string, bool) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return "", false
	}
	m := undefinedColumnRE.FindStringSubmatch(pgErr.Message)
	if m == nil {
		return "", false
	}
	for _, c := range []struct{ flag, name string }{
		{"--column-id", cols.ID}, {"--column-aggregate-id", cols.AggregateID}, {"--column-event-type", cols.EventType},
		{"--column-payload", cols.Payload}, {"--column-aggregate-type", cols.AggregateType},
	} {
		if c.name != "" && c.name == m[1] {
			return c.flag, true
		}
	}
	return "", false
}

// missingPrivilegesError is checkTable's error when the role cannot even
// read the outbox table: the relay can do nothing, so it stops, naming
// every privilege it lacks (as the running relay's start-up check does)
// and the command that prints the grants. cause is the check's error.
func missingPrivilegesError(ctx context.Context, pool *pgxpool.Pool, table string, cause error) error {
	role, missing, err := sqladmin.MissingPrivileges(ctx, pool, table, outboxsql.Needs{})
	if err != nil || len(missing) == 0 {
		return fmt.Errorf("check outbox table %q: %w", table, cause)
	}
	names := make([]string, len(missing))
	for i, p := range missing {
		names[i] = p.String()
	}
	return fmt.Errorf("role %q lacks privileges on outbox table %q: %s; `outbox-relay grants --role %s --table %s` prints the GRANT script (docs/database.md)",
		role, table, strings.Join(names, "; "), shellArg(role), shellArg(table))
}

// isInsufficientPrivilege says err is PostgreSQL's SQLSTATE 42501.
func isInsufficientPrivilege(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501"
}

// checkOrderGuard fails, naming the fix, when the claims' order guard
// beside the outbox table is missing: every claim would fail on it.
func checkOrderGuard(ctx context.Context, pool *pgxpool.Pool, table string) error {
	check, guard, err := renderCheckOrderGuard(table)
	if err != nil {
		return err
	}
	_, err = pool.Exec(ctx, check.SQL)
	switch {
	case err == nil:
		return nil
	case isInsufficientPrivilege(err):
		// The relay's start-up check names every missing privilege, the
		// guard's too, in one line (see checkTable).
		return nil
	case claim.IsMissingTable(err):
		return fmt.Errorf("table %q has no order guard %s: run `%s` (or `outbox-relay adopt` again, with its flags, for an adopted table), which creates it (%v)",
			table, guard, migrateCommand(table), err)
	}
	return fmt.Errorf("check order guard of %q: %w", table, err)
}

// databaseReady waits (within startCtx) until the database answers and is
// a primary (or, with waitPromotion, until it is promoted), then checks
// the outbox table. starting is told what it waits for (/readyz says it).
func (f *runFlags) databaseReady(ctx, startCtx context.Context, log *zap.Logger, pool *pgxpool.Pool, waitPromotion bool, starting func(string)) error {
	if err := waitFor(startCtx, log, "database", waiting(starting, "the database", pool.Ping)); err != nil {
		return err
	}
	starting("checking the database and the outbox table")
	if err := f.checkPrimaries(startCtx, log, pool, waitPromotion); err != nil {
		return err
	}
	if err := checkTable(ctx, pool, f.table, f.lease.Columns); err != nil {
		return err
	}
	if err := checkRunnable(ctx, pool, f.table); err != nil {
		return err
	}
	return f.observe.checkTable(ctx, pool, f.table)
}

// kafkaReady waits (within startCtx) until the brokers answer, then
// checks --topic. A topic that does not exist fails every publish to it;
// it is said once, now, and the relay still starts (the topic may be
// created in a moment): /readyz names the topic until it exists.
// starting is told what it waits for (/readyz says it).
func (f *runFlags) kafkaReady(ctx, startCtx context.Context, log *zap.Logger, svc *relay.Service, starting func(string)) error {
	if err := waitFor(startCtx, log, "kafka", waiting(starting, "the broker", svc.Publisher().Ping)); err != nil {
		return err
	}
	starting("checking the topic")
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := svc.Publisher().CheckTopics(tctx, f.relay.Topic); err != nil {
		log.Error("topic check failed: events for it cannot be published until it exists; /readyz is not ready meanwhile",
			zap.String("topic", f.relay.Topic), zap.Bool("kafka_auto_create_topics", f.kafka.AutoCreateTopic), zap.Error(err))
	}
	return nil
}

// waiting wraps a start-up check so that each failure tells starting what
// the relay waits for and why: "waiting for the broker: <error>".
func waiting(starting func(string), what string, check func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		err := check(ctx)
		if err != nil {
			starting("waiting for " + what + ": " + err.Error())
		}
		return err
	}
}

// migrateCommand is the command that creates or upgrades table.
func migrateCommand(table string) string {
	if table == outbox.DefaultTable {
		return "outbox-relay migrate"
	}
	return "outbox-relay migrate --table " + shellArg(table)
}

// shellSafeRE is text a POSIX shell reads as one word, unquoted.
var shellSafeRE = regexp.MustCompile(`^[A-Za-z0-9_./:@%+=,-]+$`)

// shellArg returns s as one word of a command line that a message tells
// the user to run: unchanged when that is safe, in single quotes
// otherwise.
func shellArg(s string) string {
	if shellSafeRE.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// configFlags maps "<package>.<Config field>" onto the flag that sets it.
var configFlags = map[string]string{
	"lease.Lease": "--lease", "lease.BatchSize": "--batch-size", "lease.MaxBatchBytes": "--max-batch-bytes", "lease.Table": "--table", "lease.RelayID": "--relay-id",
	"relay.Topic": "--topic", "relay.TopicTemplate": "--topic-template", "relay.IDHeader": "--id-header", "relay.PollInterval": "--poll-interval", "relay.ClaimWindow": "--claim-window", "relay.ClaimWindowPoll": "--claim-window-poll", "relay.BusyClaimInterval": "--busy-claim-interval",
	"relay.RetryMin": "--retry-min", "relay.StallTimeout": "--stall-timeout", "relay.MaxAttempts": "--max-attempts", "relay.OnDeadLetter": "--on-dead-letter", "relay.RetryMax": "--retry-max", "relay.ShutdownTimeout": "--shutdown-timeout",
	"notify.Channel": "--channel",
	"kafka.Brokers":  "--brokers", "kafka.Topic": "--topic", "kafka.ClientID": "--kafka-client-id",
	"kafka.WriteTimeout": "--kafka-write-timeout", "kafka.BatchTimeout": "--kafka-batch-timeout",
	"kafka.Compression": "--kafka-compression", "kafka.TLSCAFile": "--kafka-tls-ca", "kafka.TLSCertFile": "--kafka-tls-cert",
	"kafka.TLSKeyFile": "--kafka-tls-key", "kafka.SASLMechanism": "--kafka-sasl-mechanism",
	"kafka.SASLUsername": "--kafka-sasl-username", "kafka.SASLPassword": "--kafka-sasl-password",
	"kafka.TLSEnabled": "--kafka-tls", "kafka.TLSInsecureSkipVerify": "--kafka-tls-insecure-skip-verify",
	"kafka.AutoCreateTopic": "--kafka-auto-create-topics",
	"kafka.Idempotent":      "--kafka-idempotent",
	"kafka.Fence":           "--kafka-fence", "kafka.TransactionalIDPrefix": "--kafka-transactional-id-prefix",
	"format.Value": "--value-format", "format.RegistryURL": "--schema-registry-url",
	"format.RegistryUsername": "--schema-registry-username", "format.RegistryPassword": "--schema-registry-password",
	"format.RegistryCAFile": "--schema-registry-ca", "format.RegistryCertFile": "--schema-registry-cert", "format.RegistryKeyFile": "--schema-registry-key",
	"format.RegistryTimeout": "--schema-registry-timeout", "format.SubjectStrategy": "--subject-name-strategy", "format.RecordHeader": "--subject-record-header",
	"format.SchemaVersion": "--schema-version", "format.SchemaRefresh": "--schema-refresh", "format.CloudEventsSource": "--cloudevents-source",
}

// kafkaFlags rewrites the kafka package's Config field names in msg
// ("turn Config.TLSEnabled off") as the flags that set them.
func kafkaFlags(msg string) string {
	return configFieldRE.ReplaceAllStringFunc(msg, func(m string) string {
		if f, ok := configFlags["kafka."+strings.TrimPrefix(m, "Config.")]; ok {
			return f
		}
		return m
	})
}

// configFieldRE finds the Config fields named in a reason.
var configFieldRE = regexp.MustCompile(`\bConfig\.(\w+)`)

// flagError rewrites a component's configuration error (an
// outbox.FieldError: component, field, reason) as "--flag: reason", so the
// user sees the flag they typed; the fields named in the reason become
// flags too. Other errors are returned as they are.
func flagError(err error) string {
	var be *relay.BudgetError
	if errors.As(err, &be) {
		return fmt.Sprintf("--kafka-write-timeout, --lease: one publish may take %s (%d attempts of --kafka-write-timeout plus kafka-go's backoffs), more than half of --lease %s, so a slow broker could outlast the lease and the events be published twice; lower --kafka-write-timeout or raise --lease",
			be.Budget, kafka.DefaultMaxAttempts, be.Lease)
	}
	var fe *outbox.FieldError
	if !errors.As(err, &fe) {
		return err.Error()
	}
	var fls []string
	for _, field := range strings.Split(fe.Field, "/") {
		fl, ok := configFlags[fe.Component+"."+field]
		if !ok {
			return err.Error()
		}
		fls = append(fls, fl)
	}
	reason := configFieldRE.ReplaceAllStringFunc(fe.Reason, func(s string) string {
		if fl, ok := configFlags[fe.Component+"."+strings.TrimPrefix(s, "Config.")]; ok {
			return fl
		}
		return s
	})
	return strings.Join(fls, ", ") + ": " + reason
}

// durationAlias is a deprecated flag name that sets the same duration as
// its replacement.
type durationAlias struct{ d *time.Duration }

func (a durationAlias) String() string {
	if a.d == nil {
		return ""
	}
	return a.d.String()
}

func (a durationAlias) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*a.d = v
	return nil
}
