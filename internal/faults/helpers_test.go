package faults

// Helpers shared by the subprocess (proc_*) and in-process (inproc_*) fault
// tests; most are internal/faultkit's, which the real-broker suite
// (internal/faults/realkafka) shares.

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/checker"
	"github.com/pgoutbox/outbox/internal/faultkit"
	"github.com/pgoutbox/outbox/internal/tcpproxy"
)

// RelayProc is an outbox-relay subprocess (faultkit.RelayProc).
type RelayProc = faultkit.RelayProc

// startRelayProc is faultkit.StartRelay.
func startRelayProc(t testing.TB, dsn string, brokers []string, topic string, extraArgs ...string) *RelayProc {
	t.Helper()
	return faultkit.StartRelay(t, dsn, brokers, topic, extraArgs...)
}

func relayBinary(t testing.TB) string { t.Helper(); return faultkit.RelayBinary(t) }

func tail(s string, n int) string { return faultkit.Tail(s, n) }

func searchPath(dsn string) string { return faultkit.SearchPath(dsn) }

// proxiedDSN returns dsn with its host and port replaced by a new
// tcpproxy.Proxy in front of the database, closed when the test ends. The
// DSN must name a TCP host.
func proxiedDSN(t testing.TB, dsn string) (string, *tcpproxy.Proxy) {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("faults: parse DSN: %v", err)
	}
	if strings.HasPrefix(cfg.Host, "/") {
		t.Skipf("faults: the database is reached over a unix socket (%s); the proxy needs TCP", cfg.Host)
	}
	p, err := tcpproxy.New(fmt.Sprintf("%s:%d", cfg.Host, cfg.Port))
	if err != nil {
		t.Fatalf("faults: proxy: %v", err)
	}
	t.Cleanup(p.Close)
	host, port, _ := strings.Cut(p.Addr(), ":")
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatalf("faults: parse DSN: %v", err)
		}
		u.Host = p.Addr()
		return u.String(), p
	}
	// key=value: later keywords win.
	return fmt.Sprintf("%s host=%s port=%s", strings.TrimSpace(dsn), host, port), p
}

func writer(t testing.TB, pool *pgxpool.Pool) *outbox.Writer {
	t.Helper()
	return faultkit.Writer(t, pool)
}

func eventPayload(i int, agg string) json.RawMessage { return faultkit.EventPayload(i, agg) }

func writeEvents(t testing.TB, pool *pgxpool.Pool, n, aggregates int) []checker.Expected {
	t.Helper()
	return faultkit.WriteEvents(t, pool, n, aggregates)
}

func matrixRow(t testing.TB, fault string, r checker.Report) {
	t.Helper()
	faultkit.MatrixRow(t, fault, r)
}

func checkTopic(t testing.TB, pool *pgxpool.Pool, brokers []string, topic, fault string, timeout time.Duration) checker.Report {
	t.Helper()
	return faultkit.CheckTopic(t, pool, brokers, topic, fault, timeout)
}
