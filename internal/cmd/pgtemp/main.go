// Command pgtemp runs a throwaway PostgreSQL cluster (see internal/pgtemp)
// until it is told to stop, for `make test`, benchmarks and local runs.
//
// Its first line on stdout is
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable
//
// and nothing else is written to stdout; diagnostics go to stderr. It stops
// the cluster and removes its directory on SIGINT or SIGTERM, or when stdin
// reaches end of file (so a parent that dies, closing the pipe, takes the
// cluster with it). Run it with -watch-stdin=false when stdin is /dev/null.
//
// Usage:
//
//	pgtemp [-port N] [-fsync] [-watch-stdin=false] [-c name=value]...
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/pgoutbox/outbox/internal/pgtemp"
)

type confFlag map[string]string

func (c confFlag) String() string { return fmt.Sprint(map[string]string(c)) }

func (c confFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want name=value, got %q", s)
	}
	c[k] = v
	return nil
}

func main() {
	port := flag.Int("port", 0, "TCP port on 127.0.0.1 (0 picks a free one)")
	fsync := flag.Bool("fsync", false, "run with fsync=on (durable commits, slower)")
	watchStdin := flag.Bool("watch-stdin", true, "stop when stdin reaches EOF")
	conf := confFlag{}
	flag.Var(conf, "c", "extra server setting name=value (repeatable)")
	flag.Parse()

	// A reader of our stdout/stderr that went away (e.g. `| head`) must not
	// kill us before the cluster is stopped: get EPIPE errors instead.
	signal.Ignore(syscall.SIGPIPE)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	c, err := pgtemp.Start(ctx, pgtemp.Options{Port: *port, Fsync: *fsync, ExtraConf: conf})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	eof := make(chan struct{})
	if *watchStdin {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			close(eof)
		}()
	}

	fmt.Printf("DATABASE_URL=%s\n", c.DSN())
	fmt.Fprintf(os.Stderr, "pgtemp: cluster in %s listening on 127.0.0.1:%d\n", c.Dir(), c.Port())

	select {
	case s := <-sigs:
		fmt.Fprintf(os.Stderr, "pgtemp: %v, stopping\n", s)
	case <-eof:
		fmt.Fprintln(os.Stderr, "pgtemp: stdin closed, stopping")
	}
	if err := c.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
