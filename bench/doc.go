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
//     writers at a constant rate, the broker down for a while (kfake
//     refusing connections, or a real broker SIGKILLed and restarted): the
//     relay's RSS before, during and after the outage, the recovery time,
//     lost events.
//   - burst: a relay process idles for a minute (the idle cost: database
//     transactions/s, relay and database CPU per 10 s), then drains one
//     transaction of 100,000 events, and again after a second of idling.
//   - backlog: one relay process drains a preloaded million-row backlog.
//   - deployed: the shape users deploy (issue 29): plain-SQL writers
//     (INSERT and pg_notify in every transaction) with 1 and 3 relay
//     processes, each its own --relay-id, interleaved in rounds, at 500
//     and 1,000 events/s and idle, and 3 relays restarted one by one under
//     load; EvaluateDeployed judges the 3/1 ratios and the rolling restart
//     against the goals.
//
// What a run costs (Cost): the CPU time of the PostgreSQL cluster's
// processes (from /proc, when the server runs on this machine), of the
// relay process, the database's transactions (pg_stat_database) and WAL
// over the run, per event, and the relay's share: the run's per-event
// figures minus those of a writers-only run at the same load (scenario
// "baseline"). EvaluateGoals checks a report against the relay's targets.
//
// Modes: "notify" (the product: listener, relay and the writer's default
// debounced wake-ups), "poll" (the product without notifications, writer
// WakeupNone), "naive" (a hand-written polling relay: one transaction that
// selects FOR UPDATE SKIP LOCKED, publishes, marks and commits) and "floor"
// (the same Kafka client and broker without a database: produce, consume).
// "notify-proc" is the notify relay as a child process (Env.RelayBin, see
// BuildRelay), whose own RSS and CPU time are read from /proc;
// "notify-proc-b" is the same with another binary (Env.RelayBinB), so
// that two builds run side by side, interleaved, in one suite (CompareAB
// sets the two apart against the spread of their runs).
// "notify-every-tx" (latency only) is the simple design beside it: the
// same process with its claim window off (no lingering, no busy
// schedule: it claims on a notification, the fallback poll or a full
// batch) and writers that notify in every transaction
// (outbox.WakeupEveryTx). SuiteConfig.LatencyRounds runs the latency modes
// several times at each rate, interleaved (A B, B A, ...).
//
// Every latency run also measures the broker's own produce-to-consume
// latency under the same load (a floor probe: LatencyConfig.FloorProbeRate)
// and, when the broker is a local process (StartLocal with a Kafka version:
// a real Apache Kafka broker from internal/kafkatemp), its CPU time per
// event.
//
// Each run gets a fresh schema (its own outbox table) and a fresh topic, one
// run after the other against the same Postgres and broker.
//
// The package is tooling, in the module bench/ of its own (bench/go.mod):
// only bench/cmd/outbox-bench uses it, so its API can change with the
// harness. Its README and the recorded results are beside it.
package bench
