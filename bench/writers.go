package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox"
)

// WritersConfig configures a writers run.
type WritersConfig struct {
	// Connections is the number of writers committing at once, each on its
	// own connection. Defaults to 16.
	Connections int
	// Duration is how long they write. Defaults to 30s.
	Duration time.Duration
	// Wakeups chooses the product's wake-ups (writer default mode,
	// outbox.WakeupDebounced, with a notify listener and relay running as
	// in production) or none (outbox.WakeupNone, relay polling only). A
	// relay publishes the events in both cases, so both carry its load.
	Wakeups bool
	// WakeupMode is the writers' wake-up by name when Wakeups is set:
	// debounced, every-tx or after-commit (the bench's own debounced
	// pg_notify after each commit, on the same connection; see
	// afterCommitWaker). Defaults to "" (debounced, the writer's default).
	WakeupMode string
	// Relay configures that relay (Relay.Mode is set from Wakeups).
	Relay RelayConfig
	// PayloadBytes is the approximate JSON payload size in bytes. Defaults
	// to 100.
	PayloadBytes int
	// Aggregates is the number of distinct aggregate IDs. Defaults to 1000.
	Aggregates int
}

func (c *WritersConfig) validate() error {
	if c.Connections == 0 {
		c.Connections = 16
	}
	if c.Duration == 0 {
		c.Duration = 30 * time.Second
	}
	if c.PayloadBytes == 0 {
		c.PayloadBytes = 100
	}
	if c.Aggregates == 0 {
		c.Aggregates = 1000
	}
	switch {
	case c.Connections < 0 || c.Connections > 1000:
		return fmt.Errorf("bench: WritersConfig.Connections: must be 1..1000, got %d", c.Connections)
	case c.Duration < 0:
		return fmt.Errorf("bench: WritersConfig.Duration: must be positive, got %s", c.Duration)
	case c.PayloadBytes < 0 || c.PayloadBytes > outbox.DefaultMaxRecordBytes:
		return fmt.Errorf("bench: WritersConfig.PayloadBytes: must be 1..%d, got %d", outbox.DefaultMaxRecordBytes, c.PayloadBytes)
	case c.Aggregates < 0:
		return fmt.Errorf("bench: WritersConfig.Aggregates: must be positive, got %d", c.Aggregates)
	}
	if m, after, err := parseWakeup(c.WakeupMode); err != nil || (c.WakeupMode != "" && (!c.Wakeups || (m == outbox.WakeupNone && !after))) {
		return fmt.Errorf("bench: WritersConfig.WakeupMode: %q is not debounced, every-tx or after-commit (with Wakeups)", c.WakeupMode)
	}
	c.Relay.Mode = ModePoll
	if c.Wakeups {
		c.Relay.Mode = ModeNotify
	}
	return c.Relay.validate()
}

// Writers runs the writers scenario once: cfg.Connections writers commit
// one-event transactions through outbox.Writer as fast as they can for
// cfg.Duration.
func (e *Env) Writers(ctx context.Context, cfg WritersConfig) (Run, error) {
	if err := e.validate(); err != nil {
		return Run{}, err
	}
	if err := cfg.validate(); err != nil {
		return Run{}, err
	}
	wcfg := outbox.WriterConfig{Wakeup: outbox.WakeupNone}
	mode := ModePoll
	var waker *afterCommitWaker
	wakeName := outbox.WakeupNone.String()
	if cfg.Wakeups {
		var after bool
		wcfg.Wakeup, after, _ = parseWakeup(cfg.WakeupMode) // "": debounced, the writer's default
		mode, wakeName = ModeNotify, wcfg.Wakeup.String()
		if after {
			wakeName = wakeAfterCommit
		}
	}
	log := e.Log.Named("writers").Named(mode)
	run := Run{Scenario: ScenarioWriters, Mode: mode, Writers: &Writers{
		Connections: cfg.Connections, Wakeups: cfg.Wakeups, WakeupMode: wakeName,
	}}
	db, err := e.freshDB(ctx, int32(cfg.Connections))
	if err != nil {
		return run, err
	}
	defer db.Close()
	wcfg.Channel = db.Schema
	if wakeName == wakeAfterCommit {
		waker = newAfterCommitWaker(db.Schema)
	}
	w, err := outbox.NewWriter(wcfg)
	if err != nil {
		return run, err
	}
	topic, err := e.freshTopic(ctx, "writers")
	if err != nil {
		return run, err
	}
	defer e.dropTopic(topic)
	if err := warmPool(ctx, db, cfg.Connections); err != nil {
		return run, err
	}
	rel, err := e.startRelay(ctx, db, topic, db.Schema, cfg.Relay, log)
	if err != nil {
		return run, err
	}
	defer rel.Stop()

	body := payload(cfg.PayloadBytes)
	var commits, failed atomic.Int64
	hists := make([]*hdrhistogram.Histogram, cfg.Connections)
	e.Progress.Begin(fmt.Sprintf("writers %d %s", cfg.Connections, wakeName), func() string {
		return fmt.Sprintf("commits %d errors %d", commits.Load(), failed.Load())
	})
	defer e.Progress.End()
	start := time.Now()
	relay0 := rel.Stats()
	deadline := start.Add(cfg.Duration)
	var wg sync.WaitGroup
	for c := range cfg.Connections {
		hists[c] = NewHistogram()
		wg.Add(1)
		go func(h *hdrhistogram.Histogram) {
			defer wg.Done()
			conn, err := db.Pool.Acquire(ctx)
			if err != nil {
				failed.Add(1)
				log.Warn("acquire", zap.Error(err))
				return
			}
			defer conn.Release()
			for i := 0; ctx.Err() == nil; i++ {
				began := time.Now()
				if began.After(deadline) {
					return
				}
				ev := outbox.Event{AggregateID: fmt.Sprintf("agg-%d", (i*cfg.Connections+c)%cfg.Aggregates), Type: "bench.event", Payload: body}
				tx, err := conn.Begin(ctx)
				if err == nil {
					if err = w.Add(ctx, tx, ev); err == nil {
						if err = tx.Commit(ctx); err == nil && waker != nil {
							err = waker.wake(ctx, conn)
						}
					} else {
						_ = tx.Rollback(context.WithoutCancel(ctx))
					}
				}
				if err != nil {
					failed.Add(1)
					if ctx.Err() == nil {
						log.Warn("transaction failed", zap.Error(err))
					}
					continue
				}
				RecordDuration(h, time.Since(began))
				commits.Add(1)
			}
		}(hists[c])
	}
	wg.Wait()
	elapsed := time.Since(start)
	run.Writers.relay = rel.Stats().sub(relay0)
	run.Writers.setRelayRates(elapsed.Seconds())
	e.Progress.End()
	if err := ctx.Err(); err != nil {
		return run, err
	}
	all := NewHistogram()
	for _, h := range hists {
		all.Merge(h)
	}
	s := Summarize(all)
	run.DurationS = elapsed.Seconds()
	run.Commits = commits.Load()
	run.FailedCommits = failed.Load()
	run.CommitsPerS = float64(run.Commits) / elapsed.Seconds()
	run.TxP50MS, run.TxP99MS = s.P50, s.P99
	return run, nil
}

// setRelayRates derives the Relay* figures from w.relay over seconds.
func (w *Writers) setRelayRates(seconds float64) {
	if seconds <= 0 {
		return
	}
	w.RelayClaimsPerS = float64(w.relay.Claims) / seconds
	w.RelayNotificationsPerS = float64(w.relay.WakeNotify) / seconds
	if n := w.relay.Claims - w.relay.EmptyClaims; n > 0 {
		w.RelayEventsPerClaim = float64(w.relay.Published) / float64(n)
	}
}
