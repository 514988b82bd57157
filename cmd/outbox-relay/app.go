package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/pgoutbox/outbox/internal/produce"
	"github.com/pgoutbox/outbox/internal/sqladmin"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// usageError is a bad flag, value or DSN: exit code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

const topUsage = `outbox-relay publishes a Postgres outbox table to Kafka.

Usage:
  outbox-relay run [flags]      relay events until SIGINT/SIGTERM
  outbox-relay migrate [flags]  create or update the outbox table
  outbox-relay requeue [flags]  put dead-lettered events back (--event-id ID or --all-dead-letters)
  outbox-relay adopt [flags]    prepare an existing (e.g. Debezium) outbox table: --table T --debezium
  outbox-relay status [flags]   oldest unpublished age, events by state, relays holding leases (--json)
  outbox-relay inspect [flags]  was an event published, when, to which topic, attempts, last error (--event-id ID, --json)
  outbox-relay grants [flags]   print the GRANT script of the relay's least-privileged role (--role ROLE)
  outbox-relay version          print the version and the VCS revision (also: outbox-relay --version)
  outbox-relay help [command]   this list, or a command's flags

Flags without a command mean run: "outbox-relay --brokers ..." is "outbox-relay
run --brokers ..." (the container image's default command is run).
Run "outbox-relay <command> --help" for a command's flags. Every flag can
also be set in the environment as OUTBOX_<FLAG_NAME> (--poll-interval is
OUTBOX_POLL_INTERVAL); the database URL also as DATABASE_URL.
`

// commandHelp is the first paragraph of each command's --help.
var commandHelp = map[string]string{
	"run":     "Relays events from the outbox table to Kafka until SIGINT or SIGTERM.\nOpenTelemetry spans of each event are off unless OTEL_TRACES_EXPORTER or\nOTEL_EXPORTER_OTLP_ENDPOINT is set (docs/operating.md, \"Trace context\").",
	"migrate": "Creates or updates the outbox table; safe to run twice or concurrently.",
	"requeue": "Puts dead-lettered events back: --event-id ID[,ID...] or --all-dead-letters.\nExit 0: requeued; 1: an ID is not a dead letter; 2: bad flags.",
	"adopt":   "Prepares an existing outbox table (e.g. Debezium's) for the relay: --table T --debezium.",
	"status":  "Oldest unpublished age, events by state, dead letters and the relays holding leases.",
	"inspect": "Was an event published, when, to which topic, its attempts and last error.\nExit 1 when the ID is not in the table.",
	"grants":  "Prints the SQL that grants --role what the relay needs on --table (and --writer-role what writers need);\nrun it as the table's owner. Connects to nothing.",
	"version": "Prints the module version, the VCS revision and whether the working tree\nhad uncommitted changes, as recorded in the binary.",
}

// command runs one outbox-relay command.
type command func(ctx context.Context, args []string, stdout, stderr io.Writer) error

var commands = map[string]command{
	"run":     cmdRun,
	"migrate": cmdMigrate,
	"adopt":   cmdAdopt,
	"requeue": cmdRequeue,
	"status":  cmdStatus,
	"inspect": cmdInspect,
	"grants":  cmdGrants,
	"version": cmdVersion,
}

// Main runs the command line args and returns the process exit code. With
// no arguments it lists the commands; with flags but no command it runs
// the relay (so a container's arguments can be flags only).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stdout, topUsage)
		return exitOK
	}
	switch args[0] {
	case "-h", "-help", "--help":
		fmt.Fprint(stdout, topUsage)
		return exitOK
	case "-version", "--version":
		args = append([]string{"version"}, args[1:]...)
	}
	cmd := "run"
	if !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	if cmd == "help" {
		if len(args) == 0 || strings.HasPrefix(args[0], "-") {
			fmt.Fprint(stdout, topUsage)
			return exitOK
		}
		cmd, args = args[0], []string{"--help"}
	}
	run, ok := commands[cmd]
	if !ok {
		fmt.Fprintf(stderr, "outbox-relay: unknown command %q; see outbox-relay --help\n", cmd)
		return exitUsage
	}
	for _, w := range misspelledEnv(os.Environ()) {
		fmt.Fprintln(stderr, w)
	}
	err := run(ctx, args, stdout, stderr)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	fmt.Fprintf(stderr, "outbox-relay %s: %v\n", cmd, err)
	var ue usageError
	if errors.As(err, &ue) {
		return exitUsage
	}
	return exitFailure
}

// vcsRevision is the revision to report when the binary carries no VCS
// information of its own, set at link time: the container image is built
// with -buildvcs=false and without .git, so its Dockerfile passes
// -ldflags "-X main.vcsRevision=$VCS_REVISION".
var vcsRevision string

// version is the version to report, set at link time with -ldflags "-X
// main.version=v0.1.0" by the builds that are not `go install
// module@version`: the image builder (bench/cmd/imagebuild) and the
// Dockerfile. When it is empty, the module version from the binary's build
// information is reported: v0.1.0 for a binary built by `go install
// github.com/pgoutbox/outbox/cmd/outbox-relay@v0.1.0`, a pseudo-version
// or "(devel)" for one built in a checkout.
var version string

// relayVersion is the version versionText reports first: the stamped
// one, else the module version, else "(devel)".
func relayVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// versionText is `outbox-relay version`'s output: the version (the
// stamped one, else the module version), the module path and version, and
// the VCS revision, commit time and modified flag from the binary's build
// information.
func versionText() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		if version != "" {
			return "outbox-relay " + version + "\n"
		}
		return "outbox-relay (unknown version: the binary has no build information)\n"
	}
	mv := bi.Main.Version
	if mv == "" {
		mv = "(devel)"
	}
	v := mv
	if version != "" {
		v = version
	}
	set := map[string]string{}
	for _, s := range bi.Settings {
		set[s.Key] = s.Value
	}
	var b strings.Builder
	fmt.Fprintf(&b, "outbox-relay %s\n", v)
	if bi.Main.Path != "" {
		fmt.Fprintf(&b, "module:   %s %s\n", bi.Main.Path, mv)
	}
	switch rev := set["vcs.revision"]; {
	case rev != "":
		fmt.Fprintf(&b, "revision: %s", rev)
		if t := set["vcs.time"]; t != "" {
			fmt.Fprintf(&b, " (committed %s)", t)
		}
		b.WriteString("\n")
		switch m := set["vcs.modified"]; m {
		case "true":
			b.WriteString("modified: true (built from a working tree with uncommitted changes)\n")
		case "":
			b.WriteString("modified: unknown\n")
		default:
			fmt.Fprintf(&b, "modified: %s\n", m)
		}
	case vcsRevision != "":
		fmt.Fprintf(&b, "revision: %s (given at build time; modified: unknown)\n", vcsRevision)
	default:
		b.WriteString("revision: unknown (built without VCS information: -buildvcs=false or outside a git checkout)\n")
	}
	fmt.Fprintf(&b, "go:       %s\n", bi.GoVersion)
	return b.String()
}

func cmdVersion(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := newFlagSet("version", stdout)
	if err := parse(fs, args); err != nil {
		return err
	}
	fmt.Fprint(stdout, versionText())
	return nil
}

// commonFlags are shared by every command that talks to the database. The
// table's flags are tableFlags (flags.go).
type commonFlags struct {
	databaseURL string
	logLevel    string
	logFormat   string
}

func (c *commonFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.databaseURL, "database-url", "",
		"PostgreSQL URL or DSN, e.g. postgres://user:pass@host:5432/db (also env DATABASE_URL)")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", "json", "log format: json or console")
}

func (c *commonFlags) logger(stderr io.Writer) (*zap.Logger, error) {
	level, err := zapcore.ParseLevel(c.logLevel)
	if err != nil {
		return nil, usagef("--log-level: %q is not one of debug, info, warn, error", c.logLevel)
	}
	var enc zapcore.Encoder
	switch c.logFormat {
	case "json":
		ec := zap.NewProductionEncoderConfig()
		ec.EncodeTime = zapcore.ISO8601TimeEncoder
		// "30s", not zap's unitless 30 (seconds): the keys do not say
		// the unit, and --lease 30s reads back as it was given.
		ec.EncodeDuration = zapcore.StringDurationEncoder
		enc = zapcore.NewJSONEncoder(ec)
	case "console":
		ec := zap.NewDevelopmentEncoderConfig()
		enc = zapcore.NewConsoleEncoder(ec)
	default:
		return nil, usagef("--log-format: %q is not json or console", c.logFormat)
	}
	core := zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(stderr)), level)
	return zap.New(core).Named("outbox-relay"), nil
}

// poolConfig parses --database-url. The error never repeats the URL, which
// may hold a password.
func (c *commonFlags) poolConfig() (*pgxpool.Config, error) {
	name := databaseURLSource(c.databaseURL)
	if c.databaseURL == "" {
		c.databaseURL = os.Getenv("DATABASE_URL")
	}
	if c.databaseURL == "" {
		return nil, usagef("--database-url: required (or set DATABASE_URL or OUTBOX_DATABASE_URL)")
	}
	cfg, err := pgxpool.ParseConfig(c.databaseURL)
	if err != nil {
		return nil, usagef("%s: not a valid PostgreSQL URL or DSN: %s", name, redact(err, c.databaseURL))
	}
	if err := checkHosts(cfg, name); err != nil {
		return nil, err
	}
	return cfg, nil
}

// databaseURLSource names where the database URL came from, for its
// errors: flagValue is --database-url's value after parsing, empty when
// neither the flag nor OUTBOX_DATABASE_URL set it (DATABASE_URL then
// does); a value equal to OUTBOX_DATABASE_URL's is taken to come from it.
func databaseURLSource(flagValue string) string {
	switch {
	case flagValue == "" && os.Getenv("DATABASE_URL") != "":
		return "DATABASE_URL (--database-url)"
	case flagValue != "" && flagValue == os.Getenv("OUTBOX_DATABASE_URL"):
		return "OUTBOX_DATABASE_URL (--database-url)"
	}
	return "--database-url"
}

// checkHosts refuses a URL whose host holds '@' or '#': what a password
// (or user name) holding one of them, not percent-encoded, leaves of the
// host. Connecting would retry a DNS lookup of that host for as long as
// --startup-wait, and log it, the password's tail included; the error
// names neither.
func checkHosts(cfg *pgxpool.Config, name string) error {
	hosts := []string{cfg.ConnConfig.Host}
	for _, f := range cfg.ConnConfig.Fallbacks {
		hosts = append(hosts, f.Host)
	}
	for _, h := range hosts {
		if strings.ContainsAny(h, "@#") {
			return usagef("%s: its host part holds '@' or '#', which a user name or password must not hold unencoded: "+
				"percent-encode them (@ as %%40, # as %%23, / as %%2F, ? as %%3F, : as %%3A, %% as %%25), e.g. postgres://relay:p%%40ss@db:5432/app", name)
		}
	}
	return nil
}

// redact removes the DSN from an error text, in case it embeds a password.
func redact(err error, dsn string) string {
	s := err.Error()
	if dsn != "" {
		s = strings.ReplaceAll(s, dsn, "<url>")
	}
	// pgconn.ParseConfigError prints "cannot parse `<dsn>`: reason"
	if i := strings.Index(s, "cannot parse `"); i >= 0 {
		if j := strings.Index(s[i+14:], "`"); j >= 0 {
			s = s[:i] + "cannot parse <url>" + s[i+14+j+1:]
		}
	}
	return s
}

func cmdMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("migrate", stdout)
	var common commonFlags
	var tbl tableFlags
	common.register(fs)
	tbl.registerTable(fs)
	var startupWait, wait time.Duration
	fs.DurationVar(&startupWait, "startup-wait", 0,
		"how long to retry while PostgreSQL is not reachable, e.g. 30s (0: forever, as on run; without the flag migrate fails at once)")
	fs.DurationVar(&wait, "wait", 0,
		"deprecated: the old name of --startup-wait, kept for existing scripts; unlike --startup-wait, its 0 means fail at once")
	var partitions int
	fs.IntVar(&partitions, "partitions", outboxsql.DefaultPartitions, fmt.Sprintf(
		"number of key partitions the relays share (1..%d), fixed when the table first gets them: at least the most relays you will run, far above is fine", outboxsql.MaxPartitions))
	var timePartitioned bool
	var timeInterval time.Duration
	var timeAhead int
	fs.BoolVar(&timePartitioned, "time-partitioned", false,
		"create the table partitioned by RANGE (created_at), one partition per --time-partition-interval plus a DEFAULT partition, so that retention can drop whole old partitions (run --retention-drop-partitions) instead of deleting rows; relays keep the coming partitions created. An existing plain table is refused, not converted")
	fs.DurationVar(&timeInterval, "time-partition-interval", outboxsql.DefaultTimePartitionInterval,
		fmt.Sprintf("with --time-partitioned: each partition's span, at least %s, whole minutes, aligned to multiples of it since the Unix epoch (UTC); fixed when the table is created", outboxsql.MinTimePartitionInterval))
	fs.IntVar(&timeAhead, "time-partitions-ahead", outboxsql.DefaultTimePartitionsAhead,
		fmt.Sprintf("with --time-partitioned: how many intervals after the current one get their partition in advance (1..%d)", outboxsql.MaxTimePartitionsAhead))
	from, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if !timePartitioned && (from["time-partition-interval"] != "" || from["time-partitions-ahead"] != "") {
		return usagef("--time-partition-interval and --time-partitions-ahead need --time-partitioned")
	}
	if timePartitioned {
		if timeInterval < outboxsql.MinTimePartitionInterval || timeInterval%time.Minute != 0 {
			return usagef("--time-partition-interval: must be a whole number of minutes, at least %s, got %s", outboxsql.MinTimePartitionInterval, timeInterval)
		}
		if timeAhead < 1 || timeAhead > outboxsql.MaxTimePartitionsAhead {
			return usagef("--time-partitions-ahead: must be 1..%d, got %d", outboxsql.MaxTimePartitionsAhead, timeAhead)
		}
	} else {
		timeInterval, timeAhead = 0, 0
	}
	if partitions < 1 || partitions > outboxsql.MaxPartitions {
		return usagef("--partitions: must be 1..%d, got %d", outboxsql.MaxPartitions, partitions)
	}
	if from["partitions"] == "" {
		partitions = 0 // the table's, whatever it is
	}
	log, err := common.logger(stderr)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	bound, forever, err := migrateWait(from, startupWait, wait)
	if err != nil {
		return err
	}
	if from["wait"] != "" {
		log.Warn("--wait is deprecated: use --startup-wait (OUTBOX_STARTUP_WAIT), whose 0 means forever", zap.String("set_by", from["wait"]))
	}
	pcfg, err := common.poolConfig()
	if err != nil {
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	wctx, cancel := context.WithCancel(ctx)
	if !forever {
		wctx, cancel = context.WithTimeout(ctx, bound)
	}
	defer cancel()
	if err := waitFor(wctx, log, "database", func(ctx context.Context) error { return pool.Ping(ctx) }); err != nil {
		if err2 := pool.Ping(ctx); err2 != nil {
			return fmt.Errorf("connect to database: %w", err2)
		}
	}
	applied, err := outboxsql.MigrateWith(ctx, pool, outboxsql.MigrateOptions{Table: tbl.table, Partitions: partitions,
		TimePartitioned: timePartitioned, TimePartitionInterval: timeInterval, TimePartitionsAhead: timeAhead})
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		fmt.Fprintln(stdout, "schema is up to date")
	}
	for _, r := range applied {
		fmt.Fprintf(stdout, "applied %s\n", r.Name)
	}
	// What a schema change does not fix, but the relay suffers from (a
	// sequence restarted below the table's seqs, a publication that makes
	// its UPDATEs fail): said, not refused.
	if r, err := sqladmin.Inspect(ctx, pool, tbl.table); err != nil {
		log.Warn("could not inspect the table after migrating", zap.Error(err))
	} else {
		for _, p := range r.Problems() {
			fmt.Fprintf(stderr, "outbox-relay migrate: warning: %v\n", p)
		}
	}
	return nil
}

// migrateWait returns how long migrate waits for the database (0: not at
// all) or forever. --startup-wait means what it means on run (0: forever);
// the deprecated --wait keeps its old meaning (0: fail at once). A flag on
// the command line wins over the other name's environment variable; both
// names from the same source are refused.
func migrateWait(from origins, startupWait, wait time.Duration) (d time.Duration, forever bool, err error) {
	sw, w := from["startup-wait"], from["wait"]
	if sw != "" && w != "" && from.fromCommandLine("startup-wait") == from.fromCommandLine("wait") {
		return 0, false, usagef("--startup-wait: %s and %s are both set; --wait is its deprecated name: give only --startup-wait", sw, w)
	}
	switch {
	case w != "" && (sw == "" || from.fromCommandLine("wait")):
		if wait < 0 {
			return 0, false, usagef("--wait: must not be negative, got %s", wait)
		}
		return wait, false, nil
	case sw != "":
		if startupWait < 0 {
			return 0, false, usagef("--startup-wait: must not be negative, got %s (0 waits forever)", startupWait)
		}
		return startupWait, startupWait == 0, nil
	}
	return 0, false, nil
}

// waitFor calls check until it succeeds or ctx is done, with capped
// exponential backoff, logging why it waits.
func waitFor(ctx context.Context, log *zap.Logger, what string, check func(context.Context) error) error {
	delay := 200 * time.Millisecond
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := check(cctx)
		cancel()
		if permanent(err) {
			if what == "kafka" {
				// The kafka package names its Config fields; say the flags.
				return fmt.Errorf("%s refused the connection: %s", what, kafkaFlags(err.Error()))
			}
			return fmt.Errorf("%s refused the connection: %w", what, err)
		}
		if err == nil {
			if attempt > 1 {
				log.Info(what+" is reachable", zap.Int("attempts", attempt))
			}
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s not reachable: %w", what, err)
		}
		log.Warn(what+" not reachable yet; retrying", zap.Error(err), zap.Duration("retry_in", delay), zap.Int("attempt", attempt))
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not reachable: %w", what, err)
		case <-time.After(delay):
		}
		if delay *= 2; delay > 10*time.Second {
			delay = 10 * time.Second
		}
	}
}

// permanent reports whether a connection error (nil: none) will not go
// away by waiting: the server refused the session for a reason other than
// a passing one (see passingRefusal) — the database does not exist
// (SQLSTATE 3D000), the credentials (class 28), a misspelled or invalid
// parameter in the URL (42704, 22023) — or the server does not speak TLS
// where the URL's sslmode requires it, or its certificate does not verify.
func permanent(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return !passingRefusal(pgErr.Code)
	}
	// pgconn has no sentinel for a server that answered the SSLRequest
	// with 'N': its text is matched.
	var certErr *tls.CertificateVerificationError
	if errors.As(err, &certErr) || strings.Contains(err.Error(), "server refused TLS connection") {
		return true
	}
	// The broker refused the SASL credentials or mechanism, does not
	// speak TLS where --kafka-tls expects it, or is no Kafka broker at
	// all: waiting will not help.
	return produce.IsAuthentication(err) || produce.IsTLS(err) || produce.IsNotKafka(err)
}

// passingRefusal reports whether the server's SQLSTATE refuses a session
// only for a while: a connection exception (class 08), too many
// connections or another resource short (53), the server starting up,
// shutting down or cancelling (57: cannot_connect_now, admin_shutdown,
// query_canceled), a system error (58) or an internal error (XX).
func passingRefusal(code string) bool {
	return pgerrcode.IsConnectionException(code) || pgerrcode.IsInsufficientResources(code) ||
		pgerrcode.IsOperatorIntervention(code) || pgerrcode.IsSystemError(code) || pgerrcode.IsInternalError(code)
}

func connectFunc(cfg *pgx.ConnConfig) func(ctx context.Context) (*pgx.Conn, error) {
	return func(ctx context.Context) (*pgx.Conn, error) {
		return pgx.ConnectConfig(ctx, cfg.Copy())
	}
}

// flagSet wraps flag.FlagSet so registration helpers can return it.
type flagSet flag.FlagSet

func (f *flagSet) std() *flag.FlagSet { return (*flag.FlagSet)(f) }
