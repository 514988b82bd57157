// Command kafkatemp runs a throwaway Apache Kafka cluster (see
// internal/kafkatemp) until it is told to stop, for `make test`,
// benchmarks and local runs.
//
// Its first line on stdout is
//
//	KAFKA_BROKERS=127.0.0.1:PORT[,127.0.0.1:PORT...]
//
// and nothing else is written to stdout; diagnostics go to stderr. It stops
// the cluster and removes its directory on SIGINT or SIGTERM, or when stdin
// reaches end of file (so a parent that dies, closing the pipe, takes the
// cluster with it). Run it with -watch-stdin=false when stdin is /dev/null.
//
// Usage:
//
//	kafkatemp [-version 4.4.0] [-brokers N] [-fast-start] [-heap-mb N] [-cpus LIST] [-watch-stdin=false] [-p name=value]... [-log logger=LEVEL]...
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

	"github.com/pgoutbox/outbox/internal/kafkatemp"
)

type propFlag map[string]string

func (p propFlag) String() string { return fmt.Sprint(map[string]string(p)) }

func (p propFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want name=value, got %q", s)
	}
	p[k] = v
	return nil
}

func main() {
	version := flag.String("version", kafkatemp.V44, "Kafka version (tested: "+strings.Join(kafkatemp.Versions, ", ")+")")
	brokers := flag.Int("brokers", 1, "number of nodes (combined broker and controller)")
	fast := flag.Bool("fast-start", false, "C1 compiler and serial GC: faster start, slower under load")
	heap := flag.Int("heap-mb", 512, "maximum JVM heap per node, MiB")
	watchStdin := flag.Bool("watch-stdin", true, "stop when stdin reaches EOF")
	cpus := flag.String("cpus", "", "pin the JVMs to these CPUs (taskset -c list, e.g. 1); empty: no pinning")
	props := propFlag{}
	flag.Var(props, "p", "extra server.properties setting name=value (repeatable)")
	loggers := propFlag{}
	flag.Var(loggers, "log", "log4j2 logger level logger=LEVEL, e.g. kafka.request.logger=DEBUG (repeatable); logs go to each node's server.log")
	flag.Parse()

	signal.Ignore(syscall.SIGPIPE)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	c, err := kafkatemp.Start(ctx, kafkatemp.Options{Version: *version, Brokers: *brokers, FastStart: *fast, HeapMB: *heap, Props: props,
		Loggers: loggers, CPUs: *cpus})
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

	fmt.Printf("KAFKA_BROKERS=%s\n", strings.Join(c.Brokers(), ","))
	fmt.Fprintf(os.Stderr, "kafkatemp: Kafka %s, %d broker(s) in %s listening on %s\n", c.Version(), *brokers, c.Dir(), strings.Join(c.Brokers(), ","))

	select {
	case s := <-sigs:
		fmt.Fprintf(os.Stderr, "kafkatemp: %v, stopping\n", s)
	case <-eof:
		fmt.Fprintln(os.Stderr, "kafkatemp: stdin closed, stopping")
	}
	if err := c.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
