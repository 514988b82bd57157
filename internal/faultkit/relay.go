// Package faultkit holds what the fault suites (internal/faults, and the
// real-broker suite internal/faults/realkafka) share: outbox-relay
// subprocesses, a steady writer, and the checks every fault test ends
// with. It is for tests only; production code must not import it.
package faultkit

import (
	"fmt"
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

// RelayBinary builds cmd/outbox-relay once per test process and returns
// the binary's path.
func RelayBinary(t testing.TB) string {
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
		t.Fatalf("faultkit: %v", relayBin.err)
	}
	return relayBin.path
}

// SweepStaleBinDirs removes the binary directories of test processes that
// are gone. Call it from TestMain.
func SweepStaleBinDirs() {
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

// StartRelay starts `outbox-relay run` on dsn (which selects the schema
// through search_path), brokers and topic, with console logs at info level
// captured (shown when the test fails). Unless extraArgs set them, it uses
// --channel <the DSN's search_path> (the writers of WriteEvents notify
// there, so parallel tests do not wake each other's relays),
// --shutdown-timeout 5s and no metrics server. Later flags override
// earlier ones, so extraArgs may override anything. The process is
// SIGKILLed when the test ends if it still runs, and dies with the test
// binary (PR_SET_PDEATHSIG).
func StartRelay(t testing.TB, dsn string, brokers []string, topic string, extraArgs ...string) *RelayProc {
	t.Helper()
	bin := RelayBinary(t)
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
	if ch := SearchPath(dsn); ch != "" {
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
		t.Fatalf("faultkit: start relay: %v", err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("%s (pid %d) %s stderr:\n%s", p.Name, p.cmd.Process.Pid, strings.Join(args, " "), Tail(p.Stderr(), 20000))
		}
	})
	return p
}

var relayCount atomic.Int64

// Pid is the process ID.
func (p *RelayProc) Pid() int { return p.cmd.Process.Pid }

// PeakRSS returns the process's peak resident set size so far, in bytes:
// VmHWM of /proc/<pid>/status (Linux), what a container's memory limit
// is measured against. It fails once the process has been reaped.
func (p *RelayProc) PeakRSS() (int64, error) {
	status, err := os.ReadFile("/proc/" + strconv.Itoa(p.Pid()) + "/status")
	if err != nil {
		return 0, fmt.Errorf("faultkit: peak RSS of %s: %w", p.Name, err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("faultkit: peak RSS of %s: %q: %w", p.Name, line, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("faultkit: peak RSS of %s: no VmHWM in /proc/%d/status", p.Name, p.Pid())
}

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

// Err returns the exit error once the process has exited (nil for exit
// status 0, and while it runs).
func (p *RelayProc) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.err
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

// Signal sends sig (e.g. SIGSTOP, SIGCONT) to the relay.
func (p *RelayProc) Signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

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
			p.t.Fatalf("%s exited before it was ready: %v\n%s", p.Name, p.err, Tail(p.Stderr(), 5000))
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s not ready after %s:\n%s", p.Name, timeout, Tail(p.Stderr(), 5000))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Tail returns the last n bytes of s.
func Tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "...\n" + s[len(s)-n:]
}

// SearchPath returns the search_path set in a DSN (URL or key=value), or "".
func SearchPath(dsn string) string {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return ""
	}
	return cfg.RuntimeParams["search_path"]
}
