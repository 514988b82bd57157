// Package testenv provides the shared test environment for this module's
// tests: a PostgreSQL database with one fresh schema per test, a Kafka
// cluster (in-process kfake unless external brokers are configured), a
// goroutine-leak check, a poll-until-true helper and a test logger.
//
// It is for tests only; production code must not import it.
//
// Every test package that uses DB or MigratedDB needs
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
// PostgreSQL is found, on first use by DB, in this order:
//
//  1. the DATABASE_URL environment variable (a URL or keyword/value
//     connection string to a database where the role may create schemas);
//     `make test` starts one throwaway cluster and sets it for the whole run;
//  2. a postgres:15 container started by bench/cmd/pgcontainer (testcontainers-go,
//     in the tooling module, so the library does not require it), when a Docker
//     daemon answers a ping within 2 seconds (set OUTBOX_TEST_PG=pgtemp to
//     skip this, OUTBOX_TEST_PG=docker to insist on it);
//  3. a throwaway cluster started with internal/pgtemp from the local
//     PostgreSQL server binaries.
//
// Whatever Main started is torn down after the tests ran.
//
// Kafka: a real Apache Kafka broker (see Kafka): OUTBOX_TEST_KAFKA_BROKERS,
// as `make test` sets it, or one started per test package; kfake for
// tests that need its fault hooks (KafkaFake); a cluster of a test's own
// (RealKafka, SharedRealKafka).
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"

	"github.com/pgoutbox/outbox/internal/pgtemp"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

// Environment variables read by this package.
const (
	// EnvDatabaseURL names an existing PostgreSQL database to use.
	EnvDatabaseURL = "DATABASE_URL"
	// EnvPG selects how PostgreSQL is provided when DATABASE_URL is unset:
	// "" (Docker if reachable, else pgtemp), "docker" or "pgtemp".
	EnvPG = "OUTBOX_TEST_PG"
	// EnvKafkaBrokers is a comma-separated list of external Kafka brokers
	// for Kafka (see there).
	EnvKafkaBrokers = "OUTBOX_TEST_KAFKA_BROKERS"
	// EnvKafkaVersion is the version of the real brokers: those of
	// EnvKafkaBrokers, or the one Kafka starts (default 4.4.0).
	EnvKafkaVersion = "OUTBOX_TEST_KAFKA_VERSION"
	// EnvKafka selects Kafka's broker when EnvKafkaBrokers is unset: ""
	// (a real broker when java and mvn exist, else kfake), "real" (a real
	// broker or fail) or "kfake".
	EnvKafka = "OUTBOX_TEST_KAFKA"
	// EnvSchemaRegistryURL names an existing Confluent-compatible Schema
	// Registry for Registry (see there).
	EnvSchemaRegistryURL = "OUTBOX_TEST_SCHEMA_REGISTRY_URL"
)

// setupTimeout bounds each database set-up or tear-down step.
const setupTimeout = 2 * time.Minute

var env struct {
	mu         sync.Mutex
	mainActive bool

	once     sync.Once
	dsn      string
	err      error
	source   string         // "DATABASE_URL", "docker" or "pgtemp"
	teardown func() error   // stops the database that was started; nil if nothing
	others   []func() error // stop other services started (Kafka), in reverse order
}

// Main runs the package's tests: call it from TestMain. It runs m.Run,
// stops whatever PostgreSQL server the run started, then checks for
// leaked goroutines (with goleak; goroutines that existed before m.Run,
// or that Docker set-up started, are ignored, as are those matched by
// extra, e.g. goleak.IgnoreTopFunction("pkg.fn")). It exits the process
// with the tests' status, or 1 if they passed but goroutines leaked or
// tear-down failed. It never returns.
func Main(m *testing.M, extra ...goleak.Option) {
	opts := append([]goleak.Option{goleak.IgnoreCurrent()}, extra...)
	env.mu.Lock()
	env.mainActive = true
	env.mu.Unlock()

	code := m.Run()

	env.mu.Lock()
	teardowns := slices.Clone(env.others)
	slices.Reverse(teardowns)
	if env.teardown != nil {
		teardowns = append(teardowns, env.teardown)
	}
	env.teardown, env.others = nil, nil
	env.mu.Unlock()
	for _, teardown := range teardowns {
		if err := teardown(); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: tear-down: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	if code == 0 {
		if err := goleak.Find(opts...); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: goroutines leaked after all tests passed:\n%v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// addTeardown makes Main run stop after the tests.
func addTeardown(stop func() error) {
	env.mu.Lock()
	defer env.mu.Unlock()
	env.others = append(env.others, stop)
}

// baseDSN returns the connection string of the shared database, starting
// a server on first use.
func baseDSN(t testing.TB) string {
	t.Helper()
	env.once.Do(func() {
		env.dsn, env.source, env.err = provision()
		if env.err == nil {
			fmt.Fprintf(os.Stderr, "testenv: PostgreSQL from %s\n", env.source)
		}
	})
	if env.err != nil {
		t.Fatalf("testenv: no PostgreSQL: %v", env.err)
	}
	return env.dsn
}

func provision() (dsn, source string, err error) {
	if dsn := os.Getenv(EnvDatabaseURL); dsn != "" {
		return dsn, EnvDatabaseURL, nil
	}
	env.mu.Lock()
	active := env.mainActive
	env.mu.Unlock()
	if !active {
		return "", "", errors.New("DATABASE_URL is unset and testenv.Main is not running (add `func TestMain(m *testing.M) { testenv.Main(m) }`), so a server started here would never be stopped")
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()

	mode := os.Getenv(EnvPG)
	switch mode {
	case "", "docker", "pgtemp":
	default:
		return "", "", fmt.Errorf("%s=%q: want docker, pgtemp or empty", EnvPG, mode)
	}
	if mode != "pgtemp" {
		if derr := dockerPing(ctx); derr == nil {
			dsn, stop, err := startContainer(ctx)
			if err != nil {
				return "", "", fmt.Errorf("testcontainers: %w", err)
			}
			env.mu.Lock()
			env.teardown = stop
			env.mu.Unlock()
			return dsn, "docker", nil
		} else if mode == "docker" {
			return "", "", fmt.Errorf("%s=docker but Docker is not reachable: %w", EnvPG, derr)
		}
	}
	c, err := pgtemp.Start(ctx, pgtemp.Options{})
	if err != nil {
		return "", "", err
	}
	env.mu.Lock()
	env.teardown = c.Stop
	env.mu.Unlock()
	return c.DSN(), "pgtemp", nil
}

// TestDB is one test's database: a fresh, empty schema in the shared
// PostgreSQL database.
type TestDB struct {
	// Pool is connected with search_path set to Schema. It is closed when
	// the test ends.
	Pool *pgxpool.Pool
	// ConnString connects to the same database with search_path=Schema,
	// for extra connections a test opens itself (e.g. one that LISTENs).
	ConnString string
	// Schema is the schema's name, "test_" plus 16 hex digits.
	Schema string
}

// DB creates a fresh schema for t and returns a pool whose connections use
// it as their only search_path entry, so unqualified names resolve there.
// When the test ends the pool is closed and the schema dropped with
// CASCADE. Safe to call from parallel tests; fails t (t.Fatalf) when no
// database is available.
func DB(t testing.TB) *TestDB {
	t.Helper()
	base := baseDSN(t)
	schema := "test_" + randHex(8)
	connString, err := withSearchPath(base, schema)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if err := execOnce(ctx, base, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("testenv: create schema %s: %v", schema, err)
	}
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		t.Fatalf("testenv: parse %s: %v", connString, err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	if cfg.MaxConns < 8 {
		cfg.MaxConns = 8
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("testenv: connect: %v", err)
	}
	t.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		defer cancel()
		// A session a test left behind (a relay's backend behind a frozen
		// proxy, finishing its statement as the proxy closes) may take
		// locks on the schema's objects while the DROP takes them in
		// another order: the deadlock detector then cancels the DROP.
		// It succeeds once that session is done.
		drop := "SET lock_timeout = '30s'; DROP SCHEMA IF EXISTS " + pgx.Identifier{schema}.Sanitize() + " CASCADE"
		err := execOnce(ctx, base, drop)
		for i := 0; i < 3 && isDeadlock(err); i++ {
			err = execOnce(ctx, base, drop)
		}
		if err != nil {
			t.Errorf("testenv: drop schema %s: %v", schema, err)
		}
	})
	return &TestDB{Pool: pool, ConnString: connString, Schema: schema}
}

// migrateLockID is a PostgreSQL advisory lock key (ASCII "outbxtst")
// that serializes MigratedDB across test processes. The migration runner
// itself takes a global lock too, but retries it only every 5 seconds;
// queueing on this blocking lock first avoids those waits.
const migrateLockID int64 = 0x6f757462787473

// MigratedDB is DB plus the outbox schema migrations (sql.Migrate) applied
// in the test's schema.
func MigratedDB(t testing.TB) *TestDB {
	t.Helper()
	db := DB(t)
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()

	lockConn, err := pgx.Connect(ctx, baseDSN(t))
	if err != nil {
		t.Fatalf("testenv: connect: %v", err)
	}
	defer lockConn.Close(context.Background())
	if _, err := lockConn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrateLockID); err != nil {
		t.Fatalf("testenv: migration lock: %v", err)
	}
	_, err = outboxsql.Migrate(ctx, db.Pool)
	_, _ = lockConn.Exec(ctx, "SELECT pg_advisory_unlock($1)", migrateLockID)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return db
}

// isDeadlock reports whether err is PostgreSQL's deadlock_detected
// (40P01).
func isDeadlock(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "40P01"
}

func execOnce(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// withSearchPath returns dsn (a URL or keyword/value string) with
// search_path set to schema.
func withSearchPath(dsn, schema string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("parse %s: %w", EnvDatabaseURL, err)
		}
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	return strings.TrimSpace(dsn) + " search_path=" + schema, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Eventually calls cond until it returns true, first immediately and then
// every few milliseconds (backing off from 2ms to 50ms), and fails the test
// with t.Fatalf("eventually (after <timeout>): "+msgf, args...) if it is
// still false once timeout has passed. Call it from the test's goroutine.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, msgf string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	interval := 2 * time.Millisecond
	for {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("eventually (after %s): "+msgf, append([]any{timeout}, args...)...)
		}
		time.Sleep(interval)
		if interval < 50*time.Millisecond {
			interval *= 2
		}
	}
}

// Logger returns a zap logger at debug level that writes through t.Log, so
// output appears with the test that produced it (go test -v, or on
// failure). Logging after the test has finished panics, as t.Log does:
// stop background goroutines before the test returns.
func Logger(t testing.TB) *zap.Logger {
	return zaptest.NewLogger(t, zaptest.Level(zapcore.DebugLevel))
}
