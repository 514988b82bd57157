package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox"
)

// BrokerDownConfig configures a broker-down run.
type BrokerDownConfig struct {
	// Relay configures the relay process (Mode is set to notify).
	Relay RelayConfig
	// Rate is the writers' arrival rate, events/s (open loop). Defaults to
	// 1000.
	Rate float64
	// Writers is the number of writer goroutines. Defaults to 8.
	Writers int
	// Before is how long events flow normally before the outage (the
	// baseline RSS). Defaults to 3s.
	Before time.Duration
	// Outage is how long the broker is down (Env.SetBrokerUp(false) to
	// SetBrokerUp(true)). Defaults to 20s.
	Outage time.Duration
	// RecoveryTimeout bounds the wait for every event after the broker is
	// back. Defaults to 2m.
	RecoveryTimeout time.Duration
	// PayloadBytes and Aggregates as in LatencyConfig (defaults 100 and
	// 1000).
	PayloadBytes int
	Aggregates   int
}

func (c *BrokerDownConfig) validate() error {
	if c.Rate == 0 {
		c.Rate = 1000
	}
	if c.Writers == 0 {
		c.Writers = 8
	}
	if c.Before == 0 {
		c.Before = 3 * time.Second
	}
	if c.Outage == 0 {
		c.Outage = 20 * time.Second
	}
	if c.RecoveryTimeout == 0 {
		c.RecoveryTimeout = 2 * time.Minute
	}
	if c.PayloadBytes == 0 {
		c.PayloadBytes = 100
	}
	if c.Aggregates == 0 {
		c.Aggregates = 1000
	}
	switch {
	case c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("bench: BrokerDownConfig.Rate: must be positive, got %v", c.Rate)
	case c.Writers < 0:
		return fmt.Errorf("bench: BrokerDownConfig.Writers: must be positive, got %d", c.Writers)
	case c.Before < 0 || c.Outage < 0 || c.RecoveryTimeout < 0:
		return errors.New("bench: BrokerDownConfig: durations must be positive")
	case c.Rate*(c.Before+c.Outage).Seconds() > 50e6:
		return errors.New("bench: BrokerDownConfig.Outage: over 50 million events")
	case c.PayloadBytes < 0 || c.PayloadBytes > outbox.DefaultMaxRecordBytes:
		return fmt.Errorf("bench: BrokerDownConfig.PayloadBytes: must be 1..%d, got %d", outbox.DefaultMaxRecordBytes, c.PayloadBytes)
	case c.Aggregates < 0:
		return fmt.Errorf("bench: BrokerDownConfig.Aggregates: must be positive, got %d", c.Aggregates)
	}
	c.Relay.Mode = ModeNotify
	return c.Relay.validate()
}

// ErrNoBrokerControl is returned by BrokerDown when Env.SetBrokerUp is
// nil (external brokers): the bench cannot take them down.
var ErrNoBrokerControl = errors.New("bench: broker-down needs a broker the bench started (Env.SetBrokerUp); skipped with external brokers")

// Phases of the RSS sampler in a broker-down run.
const (
	phaseBefore = iota
	phaseOutage
	phaseRecovery
	phaseAfter
)

// BrokerDown runs the broker-down scenario: a relay process (notify,
// Env.RelayBin) publishes events that writers commit at cfg.Rate through
// outbox.Writer (debounced wake-ups); after cfg.Before the broker goes
// down (Env.SetBrokerUp: kfake refuses every connection, a real broker is
// SIGKILLed) for cfg.Outage while the writers go on; then the writers stop,
// the broker comes back (a real one is restarted and waited for:
// BrokerDown.RestartS) and the run waits until every committed event
// arrived. The relay's VmRSS is sampled every 100ms in each phase.
func (e *Env) BrokerDown(ctx context.Context, cfg BrokerDownConfig) (Run, error) {
	if err := e.validate(); err != nil {
		return Run{}, err
	}
	if err := cfg.validate(); err != nil {
		return Run{}, err
	}
	bd := &BrokerDown{OutageS: cfg.Outage.Seconds(), Rate: cfg.Rate, Outage: e.BrokerOutage}
	run := Run{Scenario: ScenarioBrokerDown, Mode: ModeNotify, BrokerDown: bd}
	if e.SetBrokerUp == nil {
		return run, ErrNoBrokerControl
	}
	log := e.Log.Named("broker-down")
	const warm = 10
	n := int(math.Ceil(cfg.Rate*(cfg.Before+cfg.Outage).Seconds())) + 1
	ids := make([]uuid.UUID, n+warm)
	for i := range ids {
		ids[i] = outbox.NewID()
	}
	body := payload(cfg.PayloadBytes)
	event := func(j int) outbox.Event {
		return outbox.Event{ID: ids[j], AggregateID: fmt.Sprintf("agg-%d", j%cfg.Aggregates), Type: "bench.event", Payload: body}
	}

	db, err := e.freshDB(ctx, int32(cfg.Writers+2))
	if err != nil {
		return run, err
	}
	defer db.Close()
	topic, err := e.freshTopic(ctx, "broker-down")
	if err != nil {
		return run, err
	}
	defer e.dropTopic(topic)
	channel := db.Schema
	w, err := outbox.NewWriter(outbox.WriterConfig{Channel: channel}) // debounced wake-ups
	if err != nil {
		return run, err
	}
	snd := &dbSender{db: db, writer: w}
	if err := warmPool(ctx, db, cfg.Writers); err != nil {
		return run, err
	}
	defer func() {
		if err := e.SetBrokerUp(context.WithoutCancel(ctx), true); err != nil {
			log.Error("broker not back after broker-down", zap.Error(err))
		}
	}()
	proc, err := e.startRelayProc(db, topic, channel, cfg.Relay, log)
	if err != nil {
		return run, err
	}
	defer proc.Stop()
	tr, err := startTracker(ctx, e.Brokers, topic, ids, log)
	if err != nil {
		return run, err
	}
	defer tr.Stop()

	// Warm-up: the relay is up and publishing.
	if err := warmUp(ctx, snd, tr, event, n, int(warm), 60*time.Second); err != nil {
		if perr := proc.Exited(); perr != nil {
			return run, perr
		}
		return run, err
	}

	rs := startRSSSampler(proc.Pid(), 4, 100*time.Millisecond)
	defer rs.Stop()
	var phase atomic.Int32
	var next, committed, txErrors atomic.Int64
	var stopWriters atomic.Bool
	e.Progress.Begin("broker-down", func() string {
		names := []string{"before", "outage", "recovery", "after"}
		rss, _ := procMemMiB(proc.Pid())
		return fmt.Sprintf("%s: committed %d received %d relay RSS %.1f MiB", names[phase.Load()], committed.Load(), tr.Distinct()-warm, rss)
	})
	defer e.Progress.End()
	interval := time.Duration(float64(time.Second) / cfg.Rate)
	start := time.Now().Add(5 * time.Millisecond)
	wctx, cancelWriters := context.WithCancel(ctx)
	defer cancelWriters()
	var wg sync.WaitGroup
	for range cfg.Writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for wctx.Err() == nil && !stopWriters.Load() {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				intended := start.Add(time.Duration(i) * interval)
				if d := time.Until(intended); d > 0 {
					select {
					case <-wctx.Done():
						return
					case <-time.After(d):
					}
				}
				if stopWriters.Load() {
					return
				}
				if err := snd.send(wctx, []outbox.Event{event(int(i))}); err != nil {
					txErrors.Add(1)
					if wctx.Err() == nil {
						log.Warn("transaction failed", zap.Error(err))
					}
					continue
				}
				committed.Add(1)
			}
		}()
	}
	stopAll := func() {
		stopWriters.Store(true)
		cancelWriters()
		wg.Wait()
	}

	if err := waitCtx(ctx, cfg.Before); err != nil {
		stopAll()
		return run, err
	}
	if err := e.SetBrokerUp(ctx, false); err != nil {
		stopAll()
		return run, fmt.Errorf("bench: broker-down: take the broker down: %w", err)
	}
	rs.SetPhase(phaseOutage)
	phase.Store(phaseOutage)
	atDown := committed.Load()
	log.Info("broker down")
	if err := waitCtx(ctx, cfg.Outage); err != nil {
		stopAll()
		return run, err
	}
	// Writers stop as the broker returns: what was committed until then
	// must all arrive.
	stopWriters.Store(true)
	restart := time.Now()
	if err := e.SetBrokerUp(ctx, true); err != nil {
		stopAll()
		return run, fmt.Errorf("bench: broker-down: bring the broker back: %w", err)
	}
	up := time.Now()
	bd.RestartS = up.Sub(restart).Seconds()
	rs.SetPhase(phaseRecovery)
	phase.Store(phaseRecovery)
	log.Info("broker up")
	wg.Wait() // in-flight transactions finish (they are counted)
	cancelWriters()
	total := committed.Load()
	bd.WrittenOutage = total - atDown

	deadline := up.Add(cfg.RecoveryTimeout)
	var waitErr error
	for tr.Distinct()-warm < total {
		if err := proc.Exited(); err != nil {
			waitErr = err
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			waitErr = fmt.Errorf("bench: broker-down: %d of %d events arrived within %s of the broker's return", tr.Distinct()-warm, total, cfg.RecoveryTimeout)
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if waitErr == nil {
		bd.RecoveryS = time.Unix(0, tr.lastRecv.Load()).Sub(up).Seconds()
	}
	rs.SetPhase(phaseAfter)
	phase.Store(phaseAfter)
	rs.Stop()
	_, hwm := procMemMiB(proc.Pid())
	e.Progress.End()
	proc.Stop()
	tr.Stop()

	run.DurationS = time.Since(start).Seconds()
	bd.RSSBeforeMiB = rs.Max(phaseBefore)
	bd.RSSMaxOutageMiB = rs.Max(phaseOutage)
	bd.RSSMaxRecoveryMiB = rs.Max(phaseRecovery)
	bd.VmHWMMiB = hwm
	bd.Count = total
	var received int64
	for j := 0; j < n; j++ {
		if !tr.recv[j].IsZero() {
			received++
		}
	}
	bd.Received = received
	bd.Lost = total - received
	bd.Duplicates = tr.duplicates.Load()
	if bd.Lost > 0 {
		log.Warn("events lost", zap.Int64("lost", bd.Lost))
	}
	if txErrors.Load() > 0 && waitErr == nil {
		waitErr = fmt.Errorf("bench: broker-down: %d transactions failed", txErrors.Load())
	}
	return run, waitErr
}
