package produce

import (
	"time"

	"github.com/pgoutbox/outbox/kafka"
)

// kafka-go's Writer backoff between produce attempts: attempt² ×
// writeBackoffMin, at most writeBackoffMax (kafka-go v0.4.51 writer.go
// partitionWriter.writeBatch and dialer.go backoff; these are the
// Writer.WriteBackoffMin/Max defaults).
const (
	writeBackoffMin = 100 * time.Millisecond
	writeBackoffMax = time.Second
)

// AttemptBudget returns the longest time kafka-go may spend on one produce
// request of a Publish call (one partition's messages, at most
// MaxBatchMessages and MaxBatchBytes) through its retries: Config.MaxAttempts
// attempts, each bounded by Config.WriteTimeout (kafka-go v0.4.51
// writer.go Writer.produce), plus kafka-go's backoff before every attempt
// after the first: attempt² × 100ms, at most 1s (writer.go
// partitionWriter.writeBatch, dialer.go backoff). With the defaults: 3 ×
// 4s + 100ms + 400ms = 12.5s. It does not include waiting for the first
// cluster metadata of a new connection (bounded by Config.DialTimeout) or
// the sequential sub-calls of a Publish call larger than one request (see
// Publish). The relay needs it to be well below its lease, so that a
// publish cannot outlive the claim of the rows it publishes.
func (p *Publisher) AttemptBudget() time.Duration {
	return attemptBudget(p.cfg.MaxAttempts, p.cfg.WriteTimeout)
}

// FitAttempts returns the Config.MaxAttempts and Config.WriteTimeout to use
// when the caller set neither (zero values) so that one Publish call fits in
// budget (see AttemptBudget): DefaultMaxAttempts attempts of at most
// DefaultWriteTimeout when they fit, else fewer and shorter ones, down to
// one attempt of budget (at least 100ms). Values the caller set are kept.
// The relay passes half its lease as the budget.
func FitAttempts(attempts int, writeTimeout, budget time.Duration) (int, time.Duration) {
	if attempts == 0 {
		attempts = kafka.DefaultMaxAttempts
		if writeTimeout == 0 && attemptBudget(attempts, 100*time.Millisecond) > budget {
			attempts = 1
		}
	}
	if writeTimeout == 0 {
		backoffs := attemptBudget(attempts, 0)
		writeTimeout = min(kafka.DefaultWriteTimeout, max(100*time.Millisecond, (budget-backoffs)/time.Duration(attempts)))
		writeTimeout = writeTimeout.Truncate(time.Millisecond)
	}
	return attempts, writeTimeout
}

func attemptBudget(attempts int, writeTimeout time.Duration) time.Duration {
	d := time.Duration(attempts) * writeTimeout
	for a := 1; a < attempts; a++ {
		d += min(time.Duration(a*a)*writeBackoffMin, writeBackoffMax)
	}
	return d
}
