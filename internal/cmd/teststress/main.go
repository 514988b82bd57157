//go:build linux

// Command teststress hunts flaky tests: it runs `go test -json` on the
// given packages N times, one package at a time, while a busy process keeps
// some CPUs taken, and prints every failed test with its output and a count
// of failures per test. `make test-stress` runs it with PostgreSQL and Kafka
// started (scripts/with-postgres.sh, scripts/with-kafka.sh).
//
// Usage:
//
//	teststress [-count 5] [-busy 1] [-run REGEXP] [-timeout 15m] [-out DIR] [-race=true] PACKAGE...
//
// The busy process is Debian's `stress-ng --cpu N` when it is on PATH,
// otherwise N goroutines of this process spinning on locked OS threads.
// Each run's full output is kept in DIR (default a new temporary
// directory) as PKG.RUN.json. The exit status is 1 if any run failed, 2 on
// bad usage.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	count := flag.Int("count", 5, "runs of each package")
	busy := flag.Int("busy", 1, "CPUs kept busy while the tests run (0: none)")
	run := flag.String("run", "", "go test -run: only the tests matching this regexp")
	timeout := flag.Duration("timeout", 15*time.Minute, "go test -timeout of each run")
	race := flag.Bool("race", true, "go test -race")
	out := flag.String("out", "", "directory for each run's output (default: a new temporary directory)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: teststress [flags] PACKAGE...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 || *count < 1 || *busy < 0 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *out == "" {
		d, err := os.MkdirTemp("", "teststress-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "teststress:", err)
			os.Exit(1)
		}
		*out = d
	} else if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "teststress:", err)
		os.Exit(1)
	}
	pkgs, err := listPackages(ctx, flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "teststress:", err)
		os.Exit(2)
	}
	stopBusy := startBusy(*busy)
	defer stopBusy()

	args := []string{"test", "-json", "-count=1", "-timeout", timeout.String()}
	if *race {
		args = append(args, "-race")
	}
	if *run != "" {
		args = append(args, "-run", *run)
	}
	var tally tally
	for _, pkg := range pkgs {
		for i := 1; i <= *count && ctx.Err() == nil; i++ {
			file := filepath.Join(*out, fmt.Sprintf("%s.%d.json", strings.ReplaceAll(pkg, "/", "_"), i))
			start := time.Now()
			res, err := runOnce(ctx, append(args, pkg), file)
			if err != nil {
				fmt.Fprintf(os.Stderr, "teststress: %s run %d: %v\n", pkg, i, err)
				os.Exit(1)
			}
			tally.add(pkg, res)
			verdict := "ok"
			if !res.ok() {
				verdict = "FAIL"
			}
			fmt.Printf("%-4s %s run %d/%d in %s (%d tests passed, %d failed, %d skipped; load %s)\n",
				verdict, pkg, i, *count, time.Since(start).Round(time.Second), res.passed, len(res.failed), res.skipped, loadAvg())
			for _, f := range res.failed {
				if hasChild(res.failed, f.name) {
					continue // its failed subtests are printed
				}
				fmt.Printf("--- FAIL %s %s\n%s\n", pkg, f.name, indent(f.output))
			}
			if res.buildFailed != "" {
				fmt.Printf("--- FAIL %s (build or package)\n%s\n", pkg, indent(res.buildFailed))
			}
		}
	}
	fmt.Print(tally.summary(*out))
	if ctx.Err() != nil {
		os.Exit(1)
	}
	if tally.failedRuns > 0 {
		os.Exit(1)
	}
}

func listPackages(ctx context.Context, patterns []string) ([]string, error) {
	cmd := exec.CommandContext(ctx, "go", append([]string{"list"}, patterns...)...)
	cmd.Stderr = os.Stderr
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	return strings.Fields(string(b)), nil
}

// startBusy keeps n CPUs busy until the returned function is called.
func startBusy(n int) func() {
	if n == 0 {
		return func() {}
	}
	if path, err := exec.LookPath("stress-ng"); err == nil {
		cmd := exec.Command(path, "--cpu", fmt.Sprint(n), "--quiet")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err == nil {
			fmt.Printf("teststress: stress-ng --cpu %d keeps %d CPU(s) busy\n", n, n)
			return func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
		}
	}
	fmt.Printf("teststress: %d spinning goroutine(s) keep %d CPU(s) busy (stress-ng not found)\n", n, n)
	var done atomic.Bool
	for range n {
		go func() {
			runtime.LockOSThread()
			x := 0
			for !done.Load() {
				x++
			}
			_ = x
		}()
	}
	return func() { done.Store(true) }
}

// event is one line of go test -json.
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

type failure struct {
	name   string
	output string
}

type result struct {
	passed, skipped int
	failed          []failure
	// buildFailed is the package-level output when the package failed
	// without a failed test (build error, panic outside a test, timeout).
	buildFailed string
}

func (r result) ok() bool { return len(r.failed) == 0 && r.buildFailed == "" }

// runOnce runs go test with args, keeping its JSON output in file.
func runOnce(ctx context.Context, args []string, file string) (result, error) {
	f, err := os.Create(file)
	if err != nil {
		return result{}, err
	}
	defer f.Close()
	cmd := exec.CommandContext(ctx, "go", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return result{}, err
	}
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	res := parse(io.TeeReader(pipe, f))
	werr := cmd.Wait()
	var exit *exec.ExitError
	if werr != nil && !errors.As(werr, &exit) {
		return res, werr
	}
	if werr != nil && res.ok() {
		res.buildFailed = strings.TrimSpace(res.buildFailed + "\n" + stderr.String())
		if res.buildFailed == "" {
			res.buildFailed = werr.Error()
		}
	}
	return res, nil
}

// parse reads go test -json output: each failed test (subtests included)
// with its own output, and package output when the package failed
// outside any test.
func parse(r io.Reader) result {
	var res result
	outputs := map[string]*strings.Builder{}
	var pkgOut strings.Builder
	pkgFailed := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			pkgOut.WriteString(sc.Text() + "\n")
			continue
		}
		if e.Test == "" {
			switch e.Action {
			case "output":
				pkgOut.WriteString(e.Output)
			case "fail":
				pkgFailed = true
			}
			continue
		}
		switch e.Action {
		case "output":
			b := outputs[e.Test]
			if b == nil {
				b = &strings.Builder{}
				outputs[e.Test] = b
			}
			b.WriteString(e.Output)
		case "pass":
			res.passed++
			delete(outputs, e.Test)
		case "skip":
			res.skipped++
			delete(outputs, e.Test)
		case "fail":
			out := ""
			if b := outputs[e.Test]; b != nil {
				out = b.String()
			}
			res.failed = append(res.failed, failure{name: e.Test, output: out})
			delete(outputs, e.Test)
		}
	}
	if pkgFailed && len(res.failed) == 0 {
		res.buildFailed = pkgOut.String()
		// A test still running when the binary died (panic, -timeout)
		// has no fail event: name it with what it printed.
		for name, b := range outputs {
			res.failed = append(res.failed, failure{name: name + " (did not finish)", output: b.String()})
		}
	}
	return res
}

type tally struct {
	runs, failedRuns int
	byTest           map[string]int
	runsByPkg        map[string]int
}

func (t *tally) add(pkg string, r result) {
	if t.byTest == nil {
		t.byTest, t.runsByPkg = map[string]int{}, map[string]int{}
	}
	t.runs++
	t.runsByPkg[pkg]++
	if !r.ok() {
		t.failedRuns++
	}
	for _, f := range r.failed {
		// A parent test fails with its subtest: count the leaves only.
		if !hasChild(r.failed, f.name) {
			t.byTest[pkg+" "+f.name]++
		}
	}
	if r.buildFailed != "" && len(r.failed) == 0 {
		t.byTest[pkg+" (package)"]++
	}
}

func hasChild(fs []failure, name string) bool {
	for _, f := range fs {
		if strings.HasPrefix(f.name, name+"/") {
			return true
		}
	}
	return false
}

func (t *tally) summary(dir string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nteststress: %d runs, %d failed; outputs in %s\n", t.runs, t.failedRuns, dir)
	names := make([]string, 0, len(t.byTest))
	for n := range t.byTest {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		pkg, _, _ := strings.Cut(n, " ")
		fmt.Fprintf(&b, "  %d/%d  %s\n", t.byTest[n], t.runsByPkg[pkg], n)
	}
	fmt.Fprintf(&b, "runs: %d passed, %d failed\n", t.runs-t.failedRuns, t.failedRuns)
	return b.String()
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return "    (no output)"
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}
