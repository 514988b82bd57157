package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/peterbourgon/ff/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/pgoutbox/outbox"
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
  outbox-relay [run] [flags]   relay events until SIGINT/SIGTERM (the default)
  outbox-relay migrate [flags] create or update the outbox table
  outbox-relay requeue [flags] put dead-lettered events back (--event-id ID or --all-dead-letters)
  outbox-relay adopt [flags]   prepare an existing (e.g. Debezium) outbox table: --table T --debezium
  outbox-relay status [flags]  oldest unpublished age, events by state, relays holding leases (--json)
  outbox-relay inspect [flags] was an event published, when, attempts, last error (--event-id ID, --json)
  outbox-relay version         print the version

Run "outbox-relay <command> --help" for a command's flags. Every flag can
also be set in the environment as OUTBOX_<FLAG_NAME> (--poll-interval is
OUTBOX_POLL_INTERVAL); the database URL also as DATABASE_URL.
`

// Main runs the command line args and returns the process exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		fmt.Fprint(stdout, topUsage)
		return exitOK
	}
	cmd := "run"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "run":
		err = cmdRun(ctx, args, stderr)
	case "migrate":
		err = cmdMigrate(ctx, args, stdout, stderr)
	case "adopt":
		err = cmdAdopt(ctx, args, stdout, stderr)
	case "requeue":
		err = cmdRequeue(ctx, args, stdout, stderr)
	case "status":
		err = cmdStatus(ctx, args, stdout, stderr)
	case "inspect":
		err = cmdInspect(ctx, args, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "outbox-relay", version())
	case "help":
		fmt.Fprint(stdout, topUsage)
	default:
		fmt.Fprint(stderr, topUsage)
		fmt.Fprintf(stderr, "\nerror: unknown command %q\n", cmd)
		return exitUsage
	}
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

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// commonFlags are shared by every command that talks to the database.
type commonFlags struct {
	databaseURL string
	table       string
	logLevel    string
	logFormat   string
}

func (c *commonFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.databaseURL, "database-url", "",
		"PostgreSQL URL or DSN, e.g. postgres://user:pass@host:5432/db (also env DATABASE_URL)")
	fs.StringVar(&c.table, "table", outbox.DefaultTable, "outbox table, optionally schema-qualified")
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
	if c.databaseURL == "" {
		c.databaseURL = os.Getenv("DATABASE_URL")
	}
	if c.databaseURL == "" {
		return nil, usagef("--database-url: required (or set DATABASE_URL)")
	}
	cfg, err := pgxpool.ParseConfig(c.databaseURL)
	if err != nil {
		return nil, usagef("--database-url: not a valid PostgreSQL URL or DSN: %s", redact(err, c.databaseURL))
	}
	return cfg, nil
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

func parse(fs *flag.FlagSet, args []string) error {
	err := ff.Parse(fs, args, ff.WithEnvVarPrefix("OUTBOX"))
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	// Zero would silently mean "the default" for these; say so instead.
	var zero error
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "lease", "batch-size", "poll-interval", "max-attempts", "shutdown-timeout", "retry-min", "retry-max", "linger-poll":
			if v := f.Value.String(); zero == nil && (v == "0" || v == "0s") {
				zero = usagef("--%s: must be positive (omit it, and %s, for the default, %s)", f.Name, envName(f.Name), f.DefValue)
			}
		}
	})
	return zero
}

func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("outbox-relay "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { printUsage(fs, stderr) }
	return fs
}

// printUsage lists every flag with its type, default and environment
// variable.
func printUsage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprintf(w, "Usage: %s [flags]\n\nFlags (each also read from the environment variable shown):\n", fs.Name())
	fs.VisitAll(func(f *flag.Flag) {
		typ, usage := flag.UnquoteUsage(f)
		env := envName(f.Name)
		fmt.Fprintf(w, "  --%s %s\n    \t%s\n    \t[env %s]", f.Name, typ, usage, env)
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}

func cmdMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("migrate", stderr)
	var common commonFlags
	common.register(fs)
	wait := fs.Duration("wait", 0, "how long to retry while the database is not reachable yet, e.g. 30s (0: fail at once)")
	if err := parse(fs, args); err != nil {
		return err
	}
	log, err := common.logger(stderr)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	pcfg, err := common.poolConfig()
	if err != nil {
		return err
	}
	if common.table != outbox.DefaultTable {
		return usagef("--table: migrate creates the table %q; to use another schema, set search_path in --database-url", outbox.DefaultTable)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	wctx, cancel := context.WithTimeout(ctx, *wait)
	defer cancel()
	if err := waitFor(wctx, log, "database", func(ctx context.Context) error { return pool.Ping(ctx) }); err != nil {
		if err2 := pool.Ping(ctx); err2 != nil {
			return fmt.Errorf("connect to database: %w", err2)
		}
	}
	applied, err := outboxsql.Migrate(ctx, pool)
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		fmt.Fprintln(stdout, "schema is up to date")
	}
	for _, r := range applied {
		fmt.Fprintf(stdout, "applied %s\n", r.Name)
	}
	return nil
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

// permanent reports whether a connection error will not go away by
// waiting: the database does not exist (SQLSTATE 3D000) or the server
// refused the credentials (class 28).
func permanent(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "3D000" || strings.HasPrefix(pgErr.Code, "28"))
}

func connectFunc(cfg *pgx.ConnConfig) func(ctx context.Context) (*pgx.Conn, error) {
	return func(ctx context.Context) (*pgx.Conn, error) {
		return pgx.ConnectConfig(ctx, cfg.Copy())
	}
}

// flagSet wraps flag.FlagSet so registration helpers can return it.
type flagSet flag.FlagSet

func (f *flagSet) std() *flag.FlagSet { return (*flag.FlagSet)(f) }

// envName is the environment variable ff reads for flag name (prefix
// OUTBOX, dashes as underscores, upper case): --poll-interval is
// OUTBOX_POLL_INTERVAL.
func envName(name string) string {
	return "OUTBOX_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}
