// Command outbox-relay publishes the events of a Postgres outbox table to
// Kafka, at least once, in order per aggregate.
//
//	outbox-relay migrate --database-url postgres://...
//	outbox-relay run --database-url postgres://... --brokers localhost:9092 --topic events
//
// Every flag can also be set through the environment: --poll-interval as
// OUTBOX_POLL_INTERVAL, and so on; the database URL also as DATABASE_URL.
// Exit codes: 0 after a clean stop, 1 on a runtime failure (for example a
// missing outbox table), 2 on a usage error (a bad flag, value or DSN).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
