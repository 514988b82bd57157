package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/testenv"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

// TestListenDatabaseURLIsValidatedNamingTheFlag: a bad
// --listen-database-url (or OUTBOX_LISTEN_DATABASE_URL) is a usage error
// naming the flag, never printing the password; it is refused with
// --no-notify; --help lists it.
func TestListenDatabaseURLIsValidatedNamingTheFlag(t *testing.T) {
	valid := []string{"run", "--database-url", "postgres://u@127.0.0.1:1/db", "--brokers", "127.0.0.1:1", "--topic", "t", "--metrics-addr", ""}
	bad := "postgres://u:s3cret@host:notaport/db"
	for name, args := range map[string][]string{
		"bad url":        append(append([]string{}, valid...), "--listen-database-url", bad),
		"with no-notify": append(append([]string{}, valid...), "--listen-database-url", "postgres://u@127.0.0.1:2/db", "--no-notify"),
	} {
		code, _, stderr := runMain(t, context.Background(), args...)
		if code != exitUsage || !strings.Contains(stderr, "--listen-database-url") {
			t.Errorf("%s: exit %d, stderr %q; want exit 2 naming --listen-database-url", name, code, stderr)
		}
		if strings.Contains(stderr, "s3cret") {
			t.Errorf("%s: stderr leaks the password: %q", name, stderr)
		}
	}
	t.Setenv("OUTBOX_LISTEN_DATABASE_URL", bad)
	code, _, stderr := runMain(t, context.Background(), valid...)
	if code != exitUsage || !strings.Contains(stderr, "--listen-database-url") || strings.Contains(stderr, "s3cret") {
		t.Errorf("OUTBOX_LISTEN_DATABASE_URL bad: exit %d, stderr %q; want exit 2 naming the flag, no password", code, stderr)
	}
	t.Setenv("OUTBOX_LISTEN_DATABASE_URL", "")
	if code, stdout, _ := runMain(t, context.Background(), "run", "--help"); code != exitOK || !strings.Contains(stdout, "--listen-database-url") || !strings.Contains(stdout, "OUTBOX_LISTEN_DATABASE_URL") {
		t.Errorf("--help: exit %d, no --listen-database-url:\n%s", code, stdout)
	}
}

// TestStandbyAtStartIsNamed: --database-url (or --listen-database-url)
// reaches a hot standby. Without --startup-wait the relay exits 1 at once
// naming the flag and the standby's host:port; with --startup-wait it logs
// one line, waits for a promotion, and exits 1 naming the standby when the
// wait ends without one. (Promotion while it waits:
// faults.TestProcStandbyPromotedUnderTheRelay.)
func TestStandbyAtStartIsNamed(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	primary := testenv.Cluster(t)
	pool, err := pgxpool.New(ctx, primary.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := outboxsql.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	standby := testenv.Replica(t, primary)
	if err := standby.CatchUp(ctx, primary); err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(standby.Port())
	args := func(dbURL string, extra ...string) []string {
		return append([]string{"run", "--database-url", dbURL, "--brokers", "127.0.0.1:1", "--topic", "t", "--metrics-addr", ""}, extra...)
	}

	// A relay that never gives up would be stopped by this context: exit 0.
	// It starts once the clusters are up and covers three relay starts.
	rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
	defer rcancel()
	start := time.Now()
	code, _, stderr := runMain(t, rctx, args(standby.DSN())...)
	if code != exitFailure || !strings.Contains(stderr, "--database-url: "+addr+" is a standby (in recovery)") || !strings.Contains(stderr, "--startup-wait") {
		t.Fatalf("on a standby: exit %d after %s, stderr %q; want exit 1 naming --database-url and %s", code, time.Since(start).Round(time.Millisecond), stderrTail(stderr), addr)
	}
	t.Logf("on a standby: exit %d after %s: %s", code, time.Since(start).Round(time.Millisecond), lastLine(stderr))

	// The wait also bounds the first connection to the standby: long
	// enough for that on a slow machine.
	start = time.Now()
	code, _, stderr = runMain(t, rctx, args(standby.DSN(), "--startup-wait", "10s")...)
	if code != exitFailure || !strings.Contains(stderr, "still a standby (in recovery) after --startup-wait 10s") || time.Since(start) < 10*time.Second {
		t.Fatalf("on a standby with --startup-wait 10s: exit %d after %s, stderr %q; want exit 1 after 10s naming the standby", code, time.Since(start).Round(time.Millisecond), stderrTail(stderr))
	}
	if n := strings.Count(stderr, "waiting for its promotion"); n != 1 {
		t.Errorf("%d \"waiting for its promotion\" lines in 10s, want 1:\n%s", n, stderrTail(stderr))
	}
	t.Logf("on a standby with --startup-wait 10s: exit %d after %s: %s", code, time.Since(start).Round(time.Millisecond), lastLine(stderr))

	code, _, stderr = runMain(t, rctx, args(primary.DSN(), "--listen-database-url", standby.DSN())...)
	if code != exitFailure || !strings.Contains(stderr, "--listen-database-url: "+addr+" is a standby (in recovery)") {
		t.Fatalf("listener on a standby: exit %d, stderr %q; want exit 1 naming --listen-database-url and %s", code, stderrTail(stderr), addr)
	}
}

func stderrTail(s string) string {
	if len(s) > 3000 {
		return "..." + s[len(s)-3000:]
	}
	return s
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
