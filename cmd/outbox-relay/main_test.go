package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func runMain(t *testing.T, ctx context.Context, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := Main(ctx, args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestBadFlagsExitTwoNamingTheFlag(t *testing.T) {
	t.Parallel()
	valid := []string{"--database-url", "postgres://u@127.0.0.1:1/db", "--brokers", "127.0.0.1:1", "--topic", "events"}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"unparsable duration", append([]string{"run", "--lease", "abc"}, valid...), "lease"},
		{"lease too short", append([]string{"run", "--lease", "10ms"}, valid...), "--lease"},
		{"batch size zero", append([]string{"run", "--batch-size", "-1"}, valid...), "--batch-size"},
		{"batch size too big", append([]string{"run", "--batch-size", "100000"}, valid...), "--batch-size"},
		{"batch bytes negative", append([]string{"run", "--max-batch-bytes", "-1"}, valid...), "--max-batch-bytes: must be 1..1073741824 bytes, got -1"},
		{"batch bytes too big", append([]string{"run", "--max-batch-bytes", "2147483648"}, valid...), "--max-batch-bytes: must be 1..1073741824 bytes"},
		{"zero batch bytes", append([]string{"run", "--max-batch-bytes", "0"}, valid...), "--max-batch-bytes: must be positive"},
		{"bad topic", []string{"run", "--database-url", "postgres://u@127.0.0.1:1/db", "--brokers", "127.0.0.1:1", "--topic", "no spaces"}, "--topic"},
		{"no topic", []string{"run", "--database-url", "postgres://u@127.0.0.1:1/db", "--brokers", "127.0.0.1:1"}, "--topic"},
		{"no brokers", []string{"run", "--database-url", "postgres://u@127.0.0.1:1/db", "--topic", "t"}, "--brokers"},
		{"broker without port", []string{"run", "--database-url", "postgres://u@127.0.0.1:1/db", "--brokers", "localhost", "--topic", "t"}, "--brokers"},
		{"bad log level", append([]string{"run", "--log-level", "loud"}, valid...), "--log-level"},
		{"bad log format", append([]string{"run", "--log-format", "xml"}, valid...), "--log-format"},
		{"bad compression", append([]string{"run", "--kafka-compression", "brotli"}, valid...), "--kafka-compression"},
		{"bad sasl", append([]string{"run", "--kafka-sasl-mechanism", "GSSAPI"}, valid...), "--kafka-sasl-mechanism"},
		{"retry max below min", append([]string{"run", "--retry-min", "10s", "--retry-max", "1s"}, valid...), "--retry-max"},
		{"unknown flag", append([]string{"run", "--nope"}, valid...), "nope"},
		{"zero lease", append([]string{"run", "--lease", "0"}, valid...), "--lease: must be positive"},
		{"zero batch size", append([]string{"run", "--batch-size", "0"}, valid...), "--batch-size: must be positive"},
		{"zero poll interval", append([]string{"run", "--poll-interval", "0s"}, valid...), "--poll-interval: must be positive"},
		{"zero busy claim interval", append([]string{"run", "--busy-claim-interval", "0s"}, valid...), "--busy-claim-interval: must be positive"},
		{"negative busy claim interval", append([]string{"run", "--busy-claim-interval", "-1ms"}, valid...), "--busy-claim-interval: must be positive, got -1ms"},
		{"bad metrics address", append([]string{"run", "--metrics-addr", "bogus"}, valid...), "--metrics-addr"},
		{"stray argument", append([]string{"run", "extra"}, valid...), "extra"},
		{"unknown command", []string{"frobnicate"}, "frobnicate"},
		{"bad dsn", []string{"run", "--database-url", "postgres://u:s3cret@host:notaport/db", "--brokers", "127.0.0.1:1", "--topic", "t"}, "--database-url"},
	}
	for _, tc := range cases {
		code, _, stderr := runMain(t, context.Background(), tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want exit 2 naming %q", tc.name, code, stderr, tc.want)
		}
		if strings.Contains(stderr, "s3cret") {
			t.Errorf("%s: stderr leaks the password: %q", tc.name, stderr)
		}
	}
}

func TestFlagsReadTheEnvironment(t *testing.T) {
	// Not parallel: it sets process environment variables.
	t.Setenv("DATABASE_URL", "")
	if code, _, stderr := runMain(t, context.Background(), "migrate"); code != exitUsage || !strings.Contains(stderr, "--database-url") {
		t.Fatalf("no database URL: exit %d, stderr %q; want exit 2 naming --database-url", code, stderr)
	}
	t.Setenv("OUTBOX_LEASE", "5ms")
	code, _, stderr := runMain(t, context.Background(), "run", "--database-url", "postgres://u@127.0.0.1:1/db", "--brokers", "127.0.0.1:1", "--topic", "t")
	if code != exitUsage || !strings.Contains(stderr, "--lease") {
		t.Fatalf("OUTBOX_LEASE=5ms: exit %d, stderr %q; want exit 2 naming --lease", code, stderr)
	}
	t.Setenv("OUTBOX_LEASE", "")
	t.Setenv("OUTBOX_MAX_BATCH_BYTES", "0")
	code, _, stderr = runMain(t, context.Background(), "run", "--database-url", "postgres://u@127.0.0.1:1/db", "--brokers", "127.0.0.1:1", "--topic", "t")
	if code != exitUsage || !strings.Contains(stderr, "--max-batch-bytes: must be positive (set by OUTBOX_MAX_BATCH_BYTES)") {
		t.Fatalf("OUTBOX_MAX_BATCH_BYTES=0: exit %d, stderr %q; want exit 2 naming --max-batch-bytes and the variable", code, stderr)
	}
}

func TestHelpShowsUnitsAndDefaults(t *testing.T) {
	t.Parallel()
	code, stdout, _ := runMain(t, context.Background(), "run", "--help")
	if code != exitOK {
		t.Fatalf("--help exit %d", code)
	}
	for _, want := range []string{"-lease", "(default 30s)", "-poll-interval", "(default 500ms)", "-batch-size", "-max-batch-bytes", "(default 16777216)", "[env OUTBOX_MAX_BATCH_BYTES]", "-shutdown-timeout", "-channel", "-kafka-sasl-mechanism", "DATABASE_URL"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("help lacks %q:\n%s", want, stdout)
		}
	}
	if code, out, _ := runMain(t, context.Background(), "version"); code != 0 || !strings.HasPrefix(out, "outbox-relay ") {
		t.Errorf("version: %d %q", code, out)
	}
}

func TestMissingTableSaysToMigrate(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	k := testenv.Kafka(t)
	code, _, stderr := runMain(t, context.Background(), "run", "--database-url", db.ConnString, "--brokers", k.Brokers[0], "--topic", "t", "--startup-wait", "10s", "--metrics-addr", "")
	if code != exitFailure || !strings.Contains(stderr, "outbox-relay migrate") || !strings.Contains(stderr, "not found") {
		t.Fatalf("exit %d, stderr %q; want exit 1 telling to run migrate", code, stderr)
	}
}

func TestWrongTableShapeIsNamed(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	k := testenv.Kafka(t)
	if _, err := db.Pool.Exec(context.Background(), "CREATE TABLE outbox (id uuid PRIMARY KEY, aggregate_id text, event_type text, payload jsonb, created_at timestamptz, published_at timestamptz)"); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runMain(t, context.Background(), "run", "--database-url", db.ConnString, "--brokers", k.Brokers[0], "--topic", "t", "--startup-wait", "10s", "--metrics-addr", "")
	if code != exitFailure || !strings.Contains(stderr, "not an outbox table") || !strings.Contains(stderr, "does not exist") {
		t.Fatalf("exit %d, stderr %q; want exit 1 naming the missing column", code, stderr)
	}
}

func TestDatabaseDownAtStartIsRetriedThenReported(t *testing.T) {
	t.Parallel()
	start := time.Now()
	code, _, stderr := runMain(t, context.Background(), "run", "--database-url", "postgres://u@127.0.0.1:1/db?connect_timeout=1", "--brokers", "127.0.0.1:1", "--topic", "t", "--startup-wait", "1500ms", "--metrics-addr", "")
	if code != exitFailure || !strings.Contains(stderr, "database not reachable yet; retrying") || !strings.Contains(stderr, "database not reachable") {
		t.Fatalf("exit %d, stderr %q; want retries logged, then exit 1", code, stderr)
	}
	if time.Since(start) < time.Second {
		t.Fatalf("gave up after %s, before --startup-wait", time.Since(start))
	}
}

func TestBrokerDownAtStartIsRetriedThenReported(t *testing.T) {
	t.Parallel()
	db := testenv.MigratedDB(t)
	// --startup-wait covers the database's checks too: long enough that
	// the broker is tried (and retried) after them however slow they are.
	code, _, stderr := runMain(t, context.Background(), "run", "--database-url", db.ConnString, "--brokers", "127.0.0.1:1", "--topic", "t", "--startup-wait", "10s", "--metrics-addr", "")
	if code != exitFailure || !strings.Contains(stderr, "kafka not reachable yet; retrying") {
		t.Fatalf("exit %d, stderr %q; want kafka retries logged, then exit 1", code, stderr)
	}
}

func TestMigrateTwiceAndConcurrently(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	var wg sync.WaitGroup
	codes := make([]int, 3)
	outs := make([]string, 3)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var stdout, stderr bytes.Buffer
			codes[i] = Main(context.Background(), []string{"migrate", "--database-url", db.ConnString}, &stdout, &stderr)
			outs[i] = stdout.String() + stderr.String()
		}()
	}
	wg.Wait()
	applied := 0
	for i, c := range codes {
		if c != 0 {
			t.Fatalf("concurrent migrate %d: exit %d: %s", i, c, outs[i])
		}
		if strings.Contains(outs[i], "applied") {
			applied++
		}
	}
	if applied != 1 {
		t.Fatalf("%d of 3 concurrent runs applied migrations, want exactly 1: %q", applied, outs)
	}
	code, out, _ := runMain(t, context.Background(), "migrate", "--database-url", db.ConnString)
	if code != 0 || !strings.Contains(out, "up to date") {
		t.Fatalf("second migrate: %d %q", code, out)
	}
}

// TestSIGTERMReleasesLeasesAndExitsZero runs the real binary.
func TestSIGTERMReleasesLeasesAndExitsZero(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bin := buildRelay(t)
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	topic := k.Topic(t, 2)
	cmd := exec.Command(bin, "run", "--brokers", strings.Join(k.Brokers, ","), "--topic", topic, "--shutdown-timeout", "5s", "--lease", "10m", "--metrics-addr", "")
	cmd.Env = append(os.Environ(), "OUTBOX_DATABASE_URL="+db.ConnString, "OUTBOX_LOG_FORMAT=console")
	// Read while the process runs: a buffer safe for that.
	var stderr testenv.SyncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var evs []outbox.Event
	for i := 0; i < 200; i++ {
		evs = append(evs, outbox.Event{AggregateID: fmt.Sprint("a", i%10), Type: "t", Payload: json.RawMessage(fmt.Sprint(i))})
	}
	if err := outbox.Add(ctx, db.Pool, evs...); err != nil {
		t.Fatal(err)
	}
	// The deadline covers the process's start and its first Kafka round trip.
	recs := k.Consume(t, topic, 200, 60*time.Second)
	if len(recs) < 200 {
		t.Fatalf("relay published %d of 200:\n%s", len(recs), stderr.String())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	signalled := time.Now()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("no exit within 60s of SIGTERM\n%s", stderr.String())
	}
	// README.md and docs/operating.md: the process exits within
	// --shutdown-timeout plus 1.5 s.
	if took, bound := time.Since(signalled), 5*time.Second+1500*time.Millisecond; took > bound {
		t.Fatalf("the process exited %s after SIGTERM, past the documented --shutdown-timeout 5s + 1.5s = %s\n%s", took.Round(time.Millisecond), bound, stderr.String())
	}
	var leased int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE published_at IS NULL OR locked_until > now()").Scan(&leased); err != nil {
		t.Fatal(err)
	}
	if leased != 0 {
		t.Fatalf("%d rows unpublished or leased after a clean stop", leased)
	}
	if !strings.Contains(stderr.String(), "relay stopped") {
		t.Fatalf("no stop log:\n%s", stderr.String())
	}
}

func TestRequeue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	var ids []string
	for i := 0; i < 3; i++ {
		id := outbox.NewID()
		ids = append(ids, id.String())
		if err := outbox.Add(ctx, db.Pool, outbox.Event{ID: id, AggregateID: "a", Type: "t", Payload: json.RawMessage(`1`)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Pool.Exec(ctx, "UPDATE outbox SET dead_lettered_at = now(), locked_until = 'infinity', attempts = 3, last_error = 'boom'"); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runMain(t, ctx, "requeue", "--database-url", db.ConnString); code != exitUsage || !strings.Contains(stderr, "--event-id") {
		t.Fatalf("requeue without a target: %d %q", code, stderr)
	}
	// Event IDs are any text (adopted tables have text and bigint IDs):
	// one that is no event's is not a dead letter.
	if code, _, stderr := runMain(t, ctx, "requeue", "--database-url", db.ConnString, "--event-id", "nope"); code != exitFailure || !strings.Contains(stderr, "not dead letters") ||
		!strings.Contains(stderr, "not a uuid, the type of the ID column id: nope") {
		t.Fatalf("requeue of an unknown ID: %d %q", code, stderr)
	}
	// An ID given twice (in either form) is one event.
	code, out, stderr := runMain(t, ctx, "requeue", "--database-url", db.ConnString, "--event-id", ids[0]+","+strings.ToUpper(ids[0]))
	if code != 0 || !strings.Contains(out, "requeued 1") {
		t.Fatalf("requeue one, given twice: %d %q %q", code, out, stderr)
	}
	if code, _, stderr := runMain(t, ctx, "requeue", "--database-url", db.ConnString, "--event-id", ids[0]); code != exitFailure || !strings.Contains(stderr, "not dead letters") {
		t.Fatalf("requeue of an event that is no longer a dead letter: %d %q", code, stderr)
	}
	code, out, _ = runMain(t, ctx, "requeue", "--database-url", db.ConnString, "--all-dead-letters")
	if code != 0 || !strings.Contains(out, "requeued 2") {
		t.Fatalf("requeue all: %d %q", code, out)
	}
	var left int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE dead_lettered_at IS NOT NULL OR locked_until IS NOT NULL OR attempts <> 0").Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d rows still parked (%v)", left, err)
	}
}

func TestTopLevelHelpListsTheCommands(t *testing.T) {
	t.Parallel()
	code, out, _ := runMain(t, context.Background(), "--help")
	for _, want := range []string{"migrate", "requeue", "adopt", "status", "inspect"} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Fatalf("--help: exit %d, output lacks %q:\n%s", code, want, out)
		}
	}
}

// A database that does not exist will not appear by waiting: report it at
// once instead of retrying forever as "not reachable yet".
func TestMissingDatabaseFailsAtOnce(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	cfg, err := pgx.ParseConfig(db.ConnString)
	if err != nil {
		t.Fatal(err)
	}
	dsn := fmt.Sprintf("postgres://%s@%s:%d/no_such_db_%s?sslmode=disable", cfg.User, cfg.Host, cfg.Port, db.Schema)
	start := time.Now()
	code, _, stderr := runMain(t, context.Background(), "run", "--database-url", dsn, "--brokers", "127.0.0.1:1", "--topic", "t", "--metrics-addr", "")
	if code != exitFailure || !strings.Contains(stderr, "database refused the connection") || !strings.Contains(stderr, "3D000") {
		t.Fatalf("exit %d, stderr %q; want exit 1 naming the missing database", code, stderr)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("took %s: it retried", d)
	}
}

// A misspelled parameter in the URL (sslmod for sslmode) is sent to the
// server as a setting, which refuses the session (42704): waiting will not
// fix it, so the relay fails at once instead of retrying as "not
// reachable yet".
func TestUnknownURLParameterFailsAtOnce(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	cfg, err := pgx.ParseConfig(db.ConnString)
	if err != nil {
		t.Fatal(err)
	}
	dsn := fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable&sslmod=disable", cfg.User, cfg.Host, cfg.Port, cfg.Database)
	// The bound only stops a relay that retries; the verdict is the exit
	// status and the message.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code, _, stderr := runMain(t, ctx, "run", "--database-url", dsn, "--brokers", "127.0.0.1:1", "--topic", "t", "--metrics-addr", "")
	if code != exitFailure || !strings.Contains(stderr, "database refused the connection") || !strings.Contains(stderr, "sslmod") {
		t.Fatalf("exit %d, stderr %q; want exit 1 naming the unknown parameter", code, stderr)
	}
}

// TestPermanentRefusals: a refusal that waiting can end is retried, any
// other refusal of the server is not.
func TestPermanentRefusals(t *testing.T) {
	for code, want := range map[string]bool{
		"3D000": true,  // invalid_catalog_name: no such database
		"28P01": true,  // invalid_password
		"42704": true,  // undefined_object: unrecognized configuration parameter
		"22023": true,  // invalid_parameter_value
		"42501": true,  // insufficient_privilege: no CONNECT on the database
		"57P03": false, // cannot_connect_now: starting up, or in recovery
		"57P01": false, // admin_shutdown
		"53300": false, // too_many_connections
		"08006": false, // connection_failure
		"58000": false, // system_error
		"XX000": false, // internal_error
	} {
		if got := permanent(&pgconn.PgError{Code: code}); got != want {
			t.Errorf("permanent(SQLSTATE %s) = %v, want %v", code, got, want)
		}
	}
	if permanent(nil) || permanent(errors.New("dial tcp: connection refused")) {
		t.Error("no error, or a refused TCP connection, counted as permanent")
	}
}

// A server without TLS will not start speaking it: with sslmode=require
// the relay fails at once, naming the refusal, instead of retrying.
func TestDatabaseWithoutTLSFailsAtOnce(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	cfg, err := pgx.ParseConfig(db.ConnString)
	if err != nil {
		t.Fatal(err)
	}
	var ssl string
	if err := db.Pool.QueryRow(context.Background(), "SHOW ssl").Scan(&ssl); err != nil || ssl != "off" {
		t.Skipf("the test database has ssl = %q (%v): this test needs a server without TLS", ssl, err)
	}
	dsn := fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=require", cfg.User, cfg.Host, cfg.Port, cfg.Database)
	start := time.Now()
	code, _, stderr := runMain(t, context.Background(), "run", "--database-url", dsn, "--brokers", "127.0.0.1:1", "--topic", "t", "--metrics-addr", "")
	if code != exitFailure || !strings.Contains(stderr, "server refused TLS connection") {
		t.Fatalf("exit %d, stderr %q; want exit 1 naming the refused TLS", code, stderr)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("took %s: it retried", d)
	}
}

func TestMigrateAnotherTable(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	k := testenv.Kafka(t)
	ctx := context.Background()
	bin := buildRelay(t)
	url := []string{"--database-url", db.ConnString}
	run := func(args ...string) (int, string, string) { return runBinary(t, bin, nil, append(args, url...)...) }
	if code, _, stderr := run("migrate", "--table", "nosuch.events"); code != exitFailure || !strings.Contains(stderr, "schema nosuch does not exist") {
		t.Fatalf("migrate into a missing schema: exit %d, stderr %q; want exit 1 naming the schema", code, stderr)
	}
	// A search_path whose schema does not exist: named, not "relation
	// outbox_schema_migrations does not exist".
	if code, _, stderr := runBinary(t, bin, nil, "migrate", "--database-url", strings.Replace(db.ConnString, "search_path="+db.Schema, "search_path=myschema", 1)); code != exitFailure || !strings.Contains(stderr, "schema myschema does not exist") {
		t.Fatalf("migrate with a missing search_path schema: exit %d, stderr %q; want exit 1 naming myschema", code, stderr)
	}
	code, _, stderr := run("run", "--brokers", k.Brokers[0], "--topic", "t", "--table", "events", "--startup-wait", "10s", "--metrics-addr", "")
	if code != exitFailure || !strings.Contains(stderr, "outbox-relay migrate --table events") {
		t.Fatalf("run on a missing table: exit %d, stderr %q; want the migrate command for that table", code, stderr)
	}
	if code, stdout, stderr := run("migrate", "--table", "events"); code != 0 || !strings.Contains(stdout, "applied") {
		t.Fatalf("migrate --table events: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, stdout, _ := run("migrate", "--table", "events"); code != 0 || !strings.Contains(stdout, "schema is up to date") {
		t.Fatalf("second migrate --table events: exit %d, stdout %q", code, stdout)
	}
	if code, _, stderr := run("migrate"); code != 0 {
		t.Fatalf("migrate of the default table next to events: exit %d, stderr %q", code, stderr)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO events (id, aggregate_id, event_type, payload) VALUES (gen_random_uuid(), 'a', 'e', '{}')`); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := run("status", "--table", "events")
	if code != 0 || !strings.Contains(stdout, "outbox table events") || !regexp.MustCompile(`claimable +1 `).MatchString(stdout) {
		t.Fatalf("status --table events: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// A broker that refuses the SASL mechanism, and a TLS handshake with a
// plaintext listener, were logged as "kafka not reachable yet; retrying"
// forever (or "context deadline exceeded"). They are named, exit 1 at
// start, as a refused database password is.
func TestKafkaAuthenticationAndTLSFailuresExitOne(t *testing.T) {
	t.Parallel()
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	base := []string{"run", "--database-url", db.ConnString, "--brokers", k.Brokers[0], "--topic", "t", "--metrics-addr", ""}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"SASL refused", []string{"--kafka-sasl-mechanism", "PLAIN", "--kafka-sasl-username", "u", "--kafka-sasl-password", "p"}, "authentication"},
		{"TLS against plaintext", []string{"--kafka-tls"}, "TLS"},
	} {
		start := time.Now()
		code, _, stderr := runMain(t, context.Background(), append(append([]string{}, base...), tc.args...)...)
		if code != exitFailure || !strings.Contains(stderr, tc.want) || strings.Contains(stderr, "retrying") || strings.Contains(stderr, "Config.") {
			t.Errorf("%s: exit %d after %s, stderr %q; want exit 1 naming %s, without retrying", tc.name, code, time.Since(start).Round(time.Millisecond), stderr, tc.want)
			continue
		}
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		t.Logf("%s: exit 1 after %s: %s", tc.name, time.Since(start).Round(time.Millisecond), lines[len(lines)-1])
	}
}
