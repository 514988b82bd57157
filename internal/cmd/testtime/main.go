//go:build unix

// Command testtime runs a test binary for `go test -exec` and appends one
// line of what it cost to the file named by $OUTBOX_TEST_TIMES:
//
//	PACKAGE_DIR wall=12.3s cpu=20.1s rss=180MiB exit=0
//
// cpu is the binary's user and system time with its children's (relay
// processes, go run builds); the servers it talks to (PostgreSQL, Kafka)
// are not counted. scripts/test-run.sh uses it to print each package's
// cost after `make test` (docs/development.md, "How the suite is
// scheduled"). Without $OUTBOX_TEST_TIMES it only runs the binary.
//
// Usage: go test -exec testtime PACKAGES
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testtime BINARY [ARGS...]")
		os.Exit(2)
	}
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// go test signals the binary's process on timeout or interrupt: pass
	// them on.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "testtime:", err)
		os.Exit(1)
	}
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	err := cmd.Wait()
	wall := time.Since(start)
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		fmt.Fprintln(os.Stderr, "testtime:", err)
		code = 1
	}
	if path := os.Getenv("OUTBOX_TEST_TIMES"); path != "" && cmd.ProcessState != nil {
		dir, _ := os.Getwd()
		cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		rss := int64(0)
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			rss = ru.Maxrss / 1024 // KiB on Linux
		}
		line := fmt.Sprintf("%s wall=%.1fs cpu=%.1fs rss=%dMiB exit=%d\n", dir, wall.Seconds(), cpu.Seconds(), rss, code)
		if f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			_, _ = f.WriteString(line)
			_ = f.Close()
		}
	}
	os.Exit(code)
}
