package faults

// Helpers shared by the subprocess (proc_*) and in-process (inproc_*) fault
// tests.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/checker"
	"github.com/pgoutbox/outbox/internal/tcpproxy"
	"github.com/pgoutbox/outbox/internal/testenv"
)

// binDirPrefix names the per-process directory that holds the relay binary
// built for this test run; the directory of a finished run is removed by
// the next run (testenv.Main exits the process, so no code runs after the
// tests to remove it).
const binDirPrefix = "outbox-faults-bin-"

var relayBin struct {
	once sync.Once
	path string
	err  error
}

// relayBinary builds cmd/outbox-relay once per test process and returns the
// binary's path.
func relayBinary(t testing.TB) string {
	t.Helper()
	relayBin.once.Do(func() {
		dir := filepath.Join(os.TempDir(), binDirPrefix+strconv.Itoa(os.Getpid()))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			relayBin.err = err
			return
		}
		_, self, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(self), "..", "..")
		bin := filepath.Join(dir, "outbox-relay")
		cmd := exec.Command("go", "build", "-o", bin, "./cmd/outbox-relay")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			relayBin.err = fmt.Errorf("go build ./cmd/outbox-relay: %v\n%s", err, out)
			return
		}
		relayBin.path = bin
	})
	if relayBin.err != nil {
		t.Fatalf("faults: %v", relayBin.err)
	}
	return relayBin.path
}

// sweepStaleBinDirs removes the binary directories of test processes that
// are gone.
func sweepStaleBinDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), binDirPrefix+"*"))
	for _, d := range dirs {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), binDirPrefix))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			_ = os.RemoveAll(d)
		}
	}
}

// RelayProc is an outbox-relay subprocess.
type RelayProc struct {
	t      testing.TB
	Name   string
	Args   []string
	cmd    *exec.Cmd
	stderr *testenv.SyncBuffer
	done   chan struct{}
	err    error // the exit status, once done is closed
}

// startRelayProc starts `outbox-relay run` on dsn (which selects the schema
// through search_path), brokers and topic, with console logs at info level
// captured (shown when the test fails). Unless extraArgs set them, it uses
// --channel <the DSN's search_path> (the writers of writeEvents notify
// there, so parallel tests do not wake each other's relays),
// --shutdown-timeout 5s and no metrics server. Later flags override
// earlier ones, so extraArgs may override anything. The process is
// SIGKILLed when the test ends if it still runs, and dies with the test
// binary (PR_SET_PDEATHSIG).
func startRelayProc(t testing.TB, dsn string, brokers []string, topic string, extraArgs ...string) *RelayProc {
	t.Helper()
	bin := relayBinary(t)
	args := []string{"run",
		"--database-url", dsn,
		"--brokers", strings.Join(brokers, ","),
		"--topic", topic,
		"--log-format", "console",
		"--shutdown-timeout", "5s",
		// Several relays run at once: no metrics server (a port taken by
		// another relay makes run exit 2).
		"--metrics-addr", "",
	}
	if ch := searchPath(dsn); ch != "" {
		args = append(args, "--channel", ch)
	}
	args = append(args, extraArgs...)
	p := &RelayProc{t: t, Args: args, stderr: &testenv.SyncBuffer{}, done: make(chan struct{})}
	p.Name = fmt.Sprintf("relay-%d", relayCount.Add(1))
	for i, a := range args {
		if a == "--relay-id" && i+1 < len(args) {
			p.Name = args[i+1]
		}
	}
	p.cmd = exec.Command(bin, args...)
	// The environment must not configure the relay behind the test's back.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OUTBOX_") && !strings.HasPrefix(kv, "DATABASE_URL=") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Stderr = p.stderr
	p.cmd.Stdout = p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("faults: start relay: %v", err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("%s (pid %d) %s stderr:\n%s", p.Name, p.cmd.Process.Pid, strings.Join(args, " "), tail(p.Stderr(), 20000))
		}
	})
	return p
}

var relayCount atomic.Int64

// Pid is the process ID.
func (p *RelayProc) Pid() int { return p.cmd.Process.Pid }

// Stderr returns everything the relay logged so far.
func (p *RelayProc) Stderr() string { return p.stderr.String() }

// Exited reports whether the process has exited.
func (p *RelayProc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Kill SIGKILLs the relay and waits for it to be gone. Safe to call on an
// exited relay.
func (p *RelayProc) Kill() {
	if !p.Exited() {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-p.done
}

// Term sends SIGTERM and returns at once; use Wait for the exit.
func (p *RelayProc) Term() {
	if !p.Exited() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
}

// Wait waits up to 30 s for the relay to exit and returns its exit error
// (nil for exit status 0); it fails the test if the relay still runs.
func (p *RelayProc) Wait() error {
	p.t.Helper()
	return p.WaitTimeout(30 * time.Second)
}

// WaitTimeout is Wait with a deadline of timeout.
func (p *RelayProc) WaitTimeout(timeout time.Duration) error {
	p.t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		p.t.Fatalf("%s did not exit within %s", p.Name, timeout)
		return nil
	}
}

// WaitReady waits until the relay logged that it started (it reached the
// database and the broker), failing the test after timeout or if it exits.
func (p *RelayProc) WaitReady(timeout time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(p.Stderr(), "relay starting") {
		if p.Exited() {
			p.t.Fatalf("%s exited before it was ready: %v\n%s", p.Name, p.err, tail(p.Stderr(), 5000))
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s not ready after %s:\n%s", p.Name, timeout, tail(p.Stderr(), 5000))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "...\n" + s[len(s)-n:]
}

// searchPath returns the search_path set in a DSN (URL or key=value), or "".
func searchPath(dsn string) string {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return ""
	}
	return cfg.RuntimeParams["search_path"]
}

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

// writer returns an outbox writer that notifies on the channel the relays
// of startRelayProc listen on (the pool's schema), in every transaction.
func writer(t testing.TB, pool *pgxpool.Pool) *outbox.Writer {
	t.Helper()
	var schema string
	if err := pool.QueryRow(context.Background(), "SELECT current_schema()").Scan(&schema); err != nil {
		t.Fatalf("faults: current_schema: %v", err)
	}
	w, err := outbox.NewWriter(outbox.WriterConfig{Channel: schema, Wakeup: outbox.WakeupEveryTx})
	if err != nil {
		t.Fatalf("faults: writer: %v", err)
	}
	return w
}

// eventPayload is the JSON payload of the i-th event of a load.
func eventPayload(i int, agg string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"n":%d,"aggregate":%q,"pad":"%s"}`, i, agg, strings.Repeat("x", 32)))
}

// writeEvents commits n events, spread round-robin over the given number of
// aggregates ("agg-0", "agg-1", ...), in transactions of up to 50 events,
// notifying the relays' channel, and returns them as the checker expects
// them (Seq is the insert order, consistent with the table's seq since one
// writer inserts them one transaction after the other).
func writeEvents(t testing.TB, pool *pgxpool.Pool, n, aggregates int) []checker.Expected {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := writer(t, pool)
	out := make([]checker.Expected, 0, n)
	for start := 0; start < n; start += 50 {
		end := min(start+50, n)
		evs := make([]outbox.Event, 0, end-start)
		for i := start; i < end; i++ {
			agg := fmt.Sprintf("agg-%d", i%aggregates)
			evs = append(evs, outbox.Event{ID: outbox.NewID(), AggregateID: agg, Type: "fault.test", Payload: eventPayload(i, agg)})
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatalf("faults: begin: %v", err)
		}
		if err := w.Add(ctx, tx, evs...); err != nil {
			_ = tx.Rollback(ctx)
			t.Fatalf("faults: write events: %v", err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("faults: commit: %v", err)
		}
		for i, e := range evs {
			out = append(out, checker.Expected{ID: e.ID, AggregateID: e.AggregateID, Payload: e.Payload, Seq: int64(start + i)})
		}
	}
	return out
}

// matrixRow logs the fault matrix row of a test:
// FAULT | committed | delivered | lost | duplicates | order violations.
func matrixRow(t testing.TB, fault string, r checker.Report) {
	t.Helper()
	t.Logf("matrix: %s | %d | %d | %d | %d | %d", fault, r.Committed, r.Delivered, r.Lost, r.Duplicates, r.OrderViolations)
}

// checkTopic reads the topic until every event of the table was seen (or
// timeout), runs the checker against the table and fails the test unless
// the report is OK. It logs the matrix row for fault and returns the
// report.
func checkTopic(t testing.TB, pool *pgxpool.Pool, brokers []string, topic, fault string, timeout time.Duration) checker.Report {
	t.Helper()
	ctx := context.Background()
	exp, err := checker.ExpectedFromTable(ctx, pool, "outbox")
	if err != nil {
		t.Fatal(err)
	}
	obs, err := checker.ObserveTopic(ctx, brokers, topic, len(exp), timeout)
	if err != nil {
		t.Fatal(err)
	}
	r := checker.Check(exp, obs)
	matrixRow(t, fault, r)
	if !r.OK() {
		t.Errorf("checker: %v", r)
	}
	return r
}
