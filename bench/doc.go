// Package bench measures the outbox relay end to end on the same code users
// run (packages outbox, lease, notify, relay and kafka): commit-to-publish
// latency, drain throughput, the cost of wake-ups for writers, and how
// --poll-interval and --lease trade latency for database load.
//
// Every measurement is a Run in a Report. Scenarios:
//
//   - latency: an open-loop constant arrival rate of one-event transactions
//     through outbox.Writer; each event's latency runs from the moment its
//     COMMIT returned in the writer to the moment an in-process Kafka
//     consumer (franz-go) received it, matched by the event_id header.
//     Transactions are scheduled by intended send time, so a stall in the
//     writers shows as schedule lag (reported separately) rather than being
//     hidden (no coordinated omission).
//   - drain: a preloaded backlog, then the relay(s) start; events/s until the
//     consumer has every event, plus a raw SQL claim+mark loop without Kafka
//     (mode "sql-ceiling") on the same statements as package lease.
//   - writers: N connections committing one-event transactions as fast as
//     they can, with the product's wake-ups and with none.
//   - sweep: the latency scenario across poll intervals and leases, with
//     claim queries/s and empty claims/s.
//   - broker-down: the relay as a child process (cmd/outbox-relay run),
//     writers at a constant rate, the in-process broker refusing
//     connections for a while: the relay's RSS before, during and after
//     the outage, the recovery time, lost events.
//
// Modes: "notify" (the product: listener, relay and the writer's default
// debounced wake-ups), "poll" (the product without notifications, writer
// WakeupNone), "naive" (a hand-written polling relay: one transaction that
// selects FOR UPDATE SKIP LOCKED, publishes, marks and commits) and "floor"
// (the same Kafka client and broker without a database: produce, consume).
// Drain also has "notify-proc": the notify relay as a child process
// (Env.RelayBin, see BuildRelay), whose own RSS is sampled from /proc.
//
// Each run gets a fresh schema (its own outbox table) and a fresh topic, one
// run after the other against the same Postgres and broker.
package bench
