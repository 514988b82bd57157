// Command outbox-dev is the quick start behind `make run`: a complete
// outbox stack on one machine with no configuration.
//
//	go run ./cmd/outbox-dev                  # throwaway PostgreSQL + embedded broker on :9092
//	go run ./cmd/outbox-dev --kafka 4.4.0    # ... + a real throwaway Apache Kafka 4.4.0 broker instead
//	go run ./cmd/outbox-dev --database-url postgres://... --brokers kafka:9092
//
// Without --database-url on the command line it starts a throwaway
// PostgreSQL cluster (initdb into a temporary directory, its own port on
// 127.0.0.1; needs the machine's PostgreSQL server binaries, see
// internal/pgtemp). Without --brokers on the command line it starts an
// embedded Kafka-protocol broker (kfake) on 127.0.0.1:--broker-port (9092),
// so kcat and any other Kafka client can consume; with --kafka 4.4.0 (or
// 3.9.1) it starts a real Apache Kafka broker on a free loopback port
// instead (internal/kafkatemp: java and mvn, the jars from Maven Central,
// about 10 s), with the topic created, stopped and removed on exit. DATABASE_URL,
// OUTBOX_DATABASE_URL and OUTBOX_BROKERS are ignored (and said to be): a
// shell set up for the real relay must not get sample events by accident.
// Before the first sample event it prints the database it writes to (host,
// port, name; never a password). It then migrates the outbox table, starts the relay, and writes a
// trickle of sample payment events through outbox.Add, printing for each one
// how long it took from the writer's COMMIT to Kafka's acknowledgement.
// The relay's /metrics, /healthz and /readyz are served on 127.0.0.1
// (--metrics-port, default a free port); the banner prints their URLs and
// the `outbox-relay status` command that reads the same database.
//
// Ctrl-C (SIGINT) or SIGTERM stops the samples, stops the relay gracefully,
// closes the broker and removes the throwaway cluster. Every other flag can
// also be set as OUTBOX_<FLAG_NAME> (--broker-port is OUTBOX_BROKER_PORT).
//
// This is a development tool: the embedded broker keeps everything in
// memory and the throwaway cluster runs with fsync off. In production use
// `outbox-relay run`, which never starts a broker by itself.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// onKill is what must happen even when a second signal ends the process
// without the graceful stop: removing the throwaway PostgreSQL cluster.
var onKill killHooks

// killHooks runs the function set last, once.
type killHooks struct {
	mu sync.Mutex
	f  func()
}

// set makes f (nil: nothing) what run does.
func (k *killHooks) set(f func()) {
	k.mu.Lock()
	k.f = f
	k.mu.Unlock()
}

func (k *killHooks) run() {
	k.mu.Lock()
	f := k.f
	k.f = nil
	k.mu.Unlock()
	if f != nil {
		f()
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first signal, a second one ends the process at once, but
	// removes the throwaway cluster first (onKill).
	context.AfterFunc(ctx, func() {
		stop()
		again := make(chan os.Signal, 1)
		signal.Notify(again, os.Interrupt, syscall.SIGTERM)
		fmt.Fprintln(os.Stderr, "outbox-dev: stopping (a second Ctrl-C stops at once)")
		go func() {
			<-again
			fmt.Fprintln(os.Stderr, "outbox-dev: second signal: stopping at once")
			onKill.run()
			os.Exit(130)
		}()
	})
	// A closed stdout makes writes fail (and run stop cleanly) instead of
	// killing the process before it removed the throwaway cluster.
	signal.Ignore(syscall.SIGPIPE)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil || errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case isUsage(err):
		fmt.Fprintf(os.Stderr, "outbox-dev: %v\n", err)
		os.Exit(2)
	default:
		fmt.Fprintf(os.Stderr, "outbox-dev: %v\n", err)
		os.Exit(1)
	}
}
