// Command outbox-soak runs the relay under load with faults injected at a
// fixed interval and verifies, with internal/checker, that nothing was lost
// and that per-aggregate order held. It is `make soak`; it is not part of
// CI.
//
// By default it starts its own PostgreSQL (internal/pgtemp, fsync on) and an
// in-process kfake broker behind a internal/faultnet listener, builds
// cmd/outbox-relay and runs --relays relay subprocesses. With
// --database-url / --brokers it uses those instead (the faults that need
// control over them, Postgres restart and broker refuse/blackhole, are then
// skipped).
//
// Faults, one every --fault-every, cycling: SIGKILL a relay and restart it;
// broker refusing connections for --outage; broker blackholed for
// --outage; Postgres restarted (pg_ctl-style fast restart); the relays'
// LISTEN backends terminated.
//
// At the end it prints committed, delivered, lost, duplicates, phantoms,
// payload mismatches, commit-to-first-delivery latency and order
// violations, and exits 1 unless nothing was lost, reordered, invented or
// altered.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	var cfg config
	fs := flag.NewFlagSet("outbox-soak", flag.ContinueOnError)
	cfg.register(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	if err := cfg.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "outbox-soak:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop) // a second signal takes the default action
	ok, err := run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "outbox-soak:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
