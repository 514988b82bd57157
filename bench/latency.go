package bench

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/produce"
	"github.com/pgoutbox/outbox/kafka"
)

// LatencyConfig configures a latency (or sweep, or baseline) run.
type LatencyConfig struct {
	// Mode is ModeNotify, ModePoll, ModeNaive, ModeNotifyProc (the notify
	// relay as a process, Env.RelayBin: its CPU time is measured),
	// ModeNotifyProcB (the same with Env.RelayBinB),
	// ModeNotifyEveryTx (the same process with its claim window off, the
	// writers notifying in every transaction), ModeFloor or
	// ModeWritersOnly (the writers alone, no relay: the baseline of the
	// cost figures). Required.
	Mode string
	// Relay configures the relay (Relay.Mode is set from Mode). Ignored
	// for floor and writers-only.
	Relay RelayConfig
	// Wakeups is for ModeWritersOnly: the writers queue the product's
	// debounced wake-ups (outbox.WakeupDebounced, as in the notify modes)
	// instead of none (as in poll and naive). Defaults to false.
	Wakeups bool
	// WakeupMode is for ModeWritersOnly: the writers' wake-up by name:
	// an outbox.WakeupMode (none, debounced, every-tx) or after-commit
	// (the bench's own debounced pg_notify after each commit, see
	// afterCommitWaker); it overrides Wakeups. Defaults to "": Wakeups
	// decides.
	WakeupMode string
	// Listen is for ModeWritersOnly: a session LISTENs on the run's
	// channel and reads every notification, as a relay's listener would,
	// so that delivering them is part of the cost. Defaults to false.
	Listen bool
	// NoCost skips the cost measurement (DB and relay CPU, transactions,
	// WAL; see Cost). Defaults to false: measured, except for floor.
	NoCost bool
	// Scenario is the run's "scenario" key. Defaults to ScenarioLatency.
	Scenario string
	// Rate is the arrival rate in events per second, spread evenly over
	// time (open loop). Defaults to 1000.
	Rate float64
	// Duration is how long events are sent. Defaults to 30s.
	Duration time.Duration
	// Writers is the number of writer goroutines, each with its own
	// connection; enough to sustain Rate when commits are slow. Defaults
	// to 8.
	Writers int
	// EventsPerTx is the number of events per transaction. Defaults to 1.
	EventsPerTx int
	// PayloadBytes is the approximate size of each event's JSON payload,
	// in bytes. Defaults to 100.
	PayloadBytes int
	// Aggregates is the number of distinct aggregate IDs (Kafka keys),
	// used round-robin. Defaults to 1000.
	Aggregates int
	// Grace is how long, after the last commit, an event may take to
	// arrive before it counts as lost. Defaults to 10s.
	Grace time.Duration
	// IdleWindow is how long the relay is watched with no traffic before
	// the measured events, from 250ms after the warm-up's last event
	// arrived (past the relay's linger), to measure its idle claim rate.
	// Defaults to 0: not measured.
	IdleWindow time.Duration
	// Warmup is the number of events sent, one per transaction, and
	// received before the measurement starts, so that connections and
	// metadata are established as in a long-running relay. Defaults to
	// 10; negative disables.
	Warmup int
	// FloorProbeRate is the rate, records per second, of the broker's
	// floor probe that runs while the writers run (every mode but
	// writers-only): a produce.Publisher of its own (acks=all) sends one
	// record per Publish call to a topic of its own on the same broker
	// and a franz-go consumer with the tracker's fetch settings reads it
	// back (Latency.FloorP50MS ...): the broker's produce-to-consume
	// latency under the run's load. Defaults to DefaultFloorProbeRate
	// (200, one record every 5 ms); negative turns it off.
	FloorProbeRate float64
	// Relays is the number of relays (notify, notify-proc or poll) run on
	// the table at once, each its own member owning its share of the key
	// partitions; the measurement starts once their ownership settled
	// (owners.Owners.Settled). Defaults to 1.
	Relays int
	// Writer is the writers' kind: WriterGo ("" too: outbox.Writer.Add
	// with the run's wake-up mode) or WriterPlainSQL (the README's
	// plain-SQL example: an INSERT into the outbox table and
	// SELECT pg_notify(channel, '') in every transaction, as a service
	// in another language writes; the wake-up settings do not apply).
	Writer string
	// CheckOrder counts order violations (Latency.OrderViolations): two
	// events of one aggregate, the second's transaction begun after the
	// first's COMMIT returned, received in the other order (or on
	// different partitions). Defaults to false.
	CheckOrder bool
	// RollingRestart, if positive, restarts the relay processes one by
	// one during the send phase, RollingRestart apart (the first
	// RollingRestart after the start): SIGTERM, wait for the exit, start
	// a replacement with the same --relay-id (Relay.RelayID) and wait
	// until it is ready (Latency.Restarts). Needs a relay-process mode,
	// Relays > 1 and a Duration of at least Relays x RollingRestart.
	RollingRestart time.Duration
	// Round is the run's round (Latency.Round), set by interleaved
	// scenarios; 0: none.
	Round int
}

// Writer kinds (LatencyConfig.Writer).
const (
	// WriterGo is outbox.Writer.Add in the writers' transactions.
	WriterGo = "go"
	// WriterPlainSQL is the README's plain-SQL example: INSERT INTO
	// outbox (id, aggregate_id, event_type, payload) and
	// SELECT pg_notify(channel, 'kp:' || outbox_key_partition(aggregate))
	// in every transaction: only the relay that owns the event wakes.
	WriterPlainSQL = "plain-sql"
	// WriterPlainSQLAll is WriterPlainSQL with an empty payload,
	// SELECT pg_notify(channel, ''): every relay wakes for every event.
	WriterPlainSQLAll = "plain-sql-all"
)

// plainSQL reports whether writer is a plain-SQL kind.
func plainSQL(writer string) bool { return writer == WriterPlainSQL || writer == WriterPlainSQLAll }

func (c *LatencyConfig) validate() error {
	switch c.Mode {
	case ModeNotify, ModePoll, ModeNaive, ModeFloor, ModeNotifyProc, ModeNotifyProcB, ModeNotifyEveryTx, ModeWritersOnly:
	default:
		return fmt.Errorf("bench: LatencyConfig.Mode: %q is not notify, poll, naive, floor, notify-proc, notify-proc-b, notify-every-tx or writers-only", c.Mode)
	}
	if c.Scenario == "" {
		c.Scenario = ScenarioLatency
	}
	if c.Rate == 0 {
		c.Rate = 1000
	}
	if c.Duration == 0 {
		c.Duration = 30 * time.Second
	}
	if c.Writers == 0 {
		c.Writers = 8
	}
	if c.EventsPerTx == 0 {
		c.EventsPerTx = 1
	}
	if c.PayloadBytes == 0 {
		c.PayloadBytes = 100
	}
	if c.Aggregates == 0 {
		c.Aggregates = 1000
	}
	if c.Grace == 0 {
		c.Grace = 10 * time.Second
	}
	if c.Warmup == 0 {
		c.Warmup = 10
	}
	if c.FloorProbeRate == 0 {
		c.FloorProbeRate = DefaultFloorProbeRate
	}
	if c.Relays == 0 {
		c.Relays = 1
	}
	switch {
	case c.Relays < 1 || c.Relays > 16:
		return fmt.Errorf("bench: LatencyConfig.Relays: must be 1..16, got %d", c.Relays)
	case c.Relays > 1 && c.Mode != ModeNotify && !procMode(c.Mode) && c.Mode != ModePoll:
		return fmt.Errorf("bench: LatencyConfig.Relays: several relays need mode notify, notify-proc, notify-proc-b, notify-every-tx or poll, not %s", c.Mode)
	case math.IsNaN(c.FloorProbeRate) || math.IsInf(c.FloorProbeRate, 0) || c.FloorProbeRate > 10000:
		return fmt.Errorf("bench: LatencyConfig.FloorProbeRate: must be at most 10000 records/s (negative: off), got %v", c.FloorProbeRate)
	case c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("bench: LatencyConfig.Rate: must be positive, got %v", c.Rate)
	case c.Duration < 0:
		return fmt.Errorf("bench: LatencyConfig.Duration: must be positive, got %s", c.Duration)
	case c.Writers < 0:
		return fmt.Errorf("bench: LatencyConfig.Writers: must be positive, got %d", c.Writers)
	case c.EventsPerTx < 0:
		return fmt.Errorf("bench: LatencyConfig.EventsPerTx: must be positive, got %d", c.EventsPerTx)
	case c.PayloadBytes < 0 || c.PayloadBytes > outbox.DefaultMaxRecordBytes:
		return fmt.Errorf("bench: LatencyConfig.PayloadBytes: must be 1..%d, got %d", outbox.DefaultMaxRecordBytes, c.PayloadBytes)
	case c.Aggregates < 0:
		return fmt.Errorf("bench: LatencyConfig.Aggregates: must be positive, got %d", c.Aggregates)
	case c.Grace < 0:
		return fmt.Errorf("bench: LatencyConfig.Grace: must be positive, got %s", c.Grace)
	case c.IdleWindow < 0:
		return fmt.Errorf("bench: LatencyConfig.IdleWindow: must not be negative, got %s", c.IdleWindow)
	case c.Rate*c.Duration.Seconds() < 1:
		return fmt.Errorf("bench: LatencyConfig.Duration: %s at %v events/s sends no event", c.Duration, c.Rate)
	case c.Rate*c.Duration.Seconds() > 50e6:
		return fmt.Errorf("bench: LatencyConfig.Duration: %s at %v events/s is over 50 million events", c.Duration, c.Rate)
	}
	switch c.Writer {
	case "", WriterGo:
	case WriterPlainSQL, WriterPlainSQLAll:
		if c.Mode == ModeFloor || c.WakeupMode != "" || c.Mode == ModeNotifyEveryTx {
			return fmt.Errorf("bench: LatencyConfig.Writer: %s writers need a database and notify in every transaction themselves (mode %s, wake-up %q)", c.Writer, c.Mode, c.WakeupMode)
		}
	default:
		return fmt.Errorf("bench: LatencyConfig.Writer: %q is not %s, %s or %s", c.Writer, WriterGo, WriterPlainSQL, WriterPlainSQLAll)
	}
	if c.RollingRestart < 0 {
		return fmt.Errorf("bench: LatencyConfig.RollingRestart: must not be negative, got %s", c.RollingRestart)
	}
	if c.RollingRestart > 0 {
		switch {
		case !procMode(c.Mode) || c.Relays < 2:
			return fmt.Errorf("bench: LatencyConfig.RollingRestart: needs several relay processes (mode notify-proc, notify-proc-b or notify-every-tx, Relays > 1), got mode %s with %d", c.Mode, c.Relays)
		case c.Duration < time.Duration(c.Relays)*c.RollingRestart:
			return fmt.Errorf("bench: LatencyConfig.Duration: %s is shorter than %d restarts %s apart", c.Duration, c.Relays, c.RollingRestart)
		}
	}
	if c.WakeupMode != "" || c.Listen {
		if c.Mode != ModeWritersOnly {
			return fmt.Errorf("bench: LatencyConfig.WakeupMode and Listen are for mode %s, not %s", ModeWritersOnly, c.Mode)
		}
		if _, _, err := parseWakeup(c.WakeupMode); err != nil {
			return fmt.Errorf("bench: LatencyConfig.WakeupMode: %w", err)
		}
	}
	if c.hasRelay() {
		c.Relay.Mode = c.Mode
		if err := c.Relay.validate(); err != nil {
			return err
		}
	}
	return nil
}

// hasRelay reports whether the run has a relay (not floor, not
// writers-only).
func (c *LatencyConfig) hasRelay() bool { return c.Mode != ModeFloor && c.Mode != ModeWritersOnly }

// Writer wake-up modes by name: outbox.WakeupMode's names, plus
// wakeAfterCommit, which the writer API does not offer: the bench itself
// sends the debounced pg_notify after each commit, in a transaction of its
// own with synchronous_commit off (see afterCommitWaker), to measure that
// alternative against the writer's in-transaction wake-up.
const wakeAfterCommit = "after-commit"

// wakeupNames are the notify-cost scenario's modes, in its order.
var wakeupNames = []string{outbox.WakeupNone.String(), outbox.WakeupDebounced.String(), outbox.WakeupEveryTx.String(), wakeAfterCommit}

// parseWakeup returns the writer mode named s ("": debounced) and whether
// the bench wakes the relay after commit instead (after-commit; the writer
// then sends none).
func parseWakeup(s string) (outbox.WakeupMode, bool, error) {
	switch s {
	case "", outbox.WakeupDebounced.String():
		return outbox.WakeupDebounced, false, nil
	case outbox.WakeupEveryTx.String():
		return outbox.WakeupEveryTx, false, nil
	case outbox.WakeupNone.String():
		return outbox.WakeupNone, false, nil
	case wakeAfterCommit:
		return outbox.WakeupNone, true, nil
	}
	return 0, false, fmt.Errorf("bench: wake-up mode %q is not none, debounced, every-tx or after-commit", s)
}

// writerWakeup is the run's writers' wake-up: the writer's mode, and
// whether the bench wakes the relay after each commit instead.
func (c *LatencyConfig) writerWakeup() (outbox.WakeupMode, bool) {
	if c.Mode == ModeWritersOnly && c.WakeupMode != "" {
		m, after, _ := parseWakeup(c.WakeupMode) // checked by validate
		return m, after
	}
	if c.Mode == ModeNotifyEveryTx {
		return outbox.WakeupEveryTx, false
	}
	if c.wakeups() {
		return outbox.WakeupDebounced, false // the writer's default
	}
	return outbox.WakeupNone, false
}

// wakeupName names the run's writers' wake-up.
func (c *LatencyConfig) wakeupName() string {
	if plainSQL(c.Writer) {
		return c.Writer
	}
	m, after := c.writerWakeup()
	if after {
		return wakeAfterCommit
	}
	return m.String()
}

// wakeups reports whether the run's writers notify the relay (debounced,
// or in every transaction in ModeNotifyEveryTx).
func (c *LatencyConfig) wakeups() bool {
	switch c.Mode {
	case ModeNotify, ModeNotifyProc, ModeNotifyProcB, ModeNotifyEveryTx:
		return true
	case ModeWritersOnly:
		return c.Wakeups
	}
	return false
}

// payload returns a JSON object of about n bytes.
func payload(n int) []byte {
	const overhead = len(`{"pad":""}`)
	pad := n - overhead
	if pad < 0 {
		pad = 0
	}
	return []byte(`{"pad":"` + strings.Repeat("x", pad) + `"}`)
}

// sender sends transactions for the latency scenario: through the outbox
// writer into the database, or straight to Kafka (floor).
type sender interface {
	send(ctx context.Context, evs []outbox.Event) error
}

type dbSender struct {
	db     *runDB
	writer *outbox.Writer
	// wake, if set, wakes the relay after each commit (after-commit).
	wake *afterCommitWaker
}

func (s *dbSender) send(ctx context.Context, evs []outbox.Event) error {
	tx, err := s.db.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	if err := s.writer.Add(ctx, tx, evs...); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	if s.wake != nil {
		return s.wake.wake(ctx, s.db.Pool)
	}
	return nil
}

// sqlSender is the plain-SQL writer (WriterPlainSQL): each transaction
// inserts its events with a plain INSERT and calls pg_notify on the
// relay's channel, as the README's example for other languages does,
// naming the events' key partitions (all: an empty payload,
// WriterPlainSQLAll).
type sqlSender struct {
	db      *runDB
	channel string
	all     bool
}

const plainSQLInsert = `INSERT INTO outbox (id, aggregate_id, event_type, payload) VALUES ($1, $2, $3, $4::jsonb)`

func (s *sqlSender) send(ctx context.Context, evs []outbox.Event) error {
	tx, err := s.db.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	for _, ev := range evs {
		if _, err := tx.Exec(ctx, plainSQLInsert, ev.ID, ev.AggregateID, ev.Type, string(ev.Payload)); err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
			return err
		}
	}
	wake, args := `SELECT pg_notify($1, 'kp:' || (SELECT string_agg(DISTINCT outbox_key_partition(a)::text, ',') FROM unnest($2::text[]) a))`, []any{s.channel, aggregates(evs)}
	if s.all {
		wake, args = "SELECT pg_notify($1, '')", []any{s.channel}
	}
	if _, err := tx.Exec(ctx, wake, args...); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	return tx.Commit(ctx)
}

// aggregates returns the events' aggregate IDs.
func aggregates(evs []outbox.Event) []string {
	a := make([]string, len(evs))
	for i, e := range evs {
		a[i] = e.AggregateID
	}
	return a
}

type kafkaSender struct{ pub *produce.Publisher }

func (s *kafkaSender) send(ctx context.Context, evs []outbox.Event) error {
	msgs := make([]kafka.Message, len(evs))
	for i, e := range evs {
		msgs[i] = kafka.Message{Key: []byte(e.AggregateID), Value: e.Payload, Headers: []kafka.Header{
			{Key: "event_id", Value: []byte(e.ID.String())},
			{Key: "event_type", Value: []byte(e.Type)},
			{Key: "aggregate_id", Value: []byte(e.AggregateID)},
		}}
	}
	return s.pub.Send(ctx, msgs)
}

// Latency runs the latency scenario for one mode and returns its Run. The
// run has its own schema and topic. Unless cfg.NoCost (or floor), it also
// measures what the run cost (Run.Cost): from just before the first
// measured transaction until every event arrived and the relay stopped
// (its connections closed, so that their statistics are flushed). A
// writers-only run has no relay and no consumer: its window ends with the
// last commit.
func (e *Env) Latency(ctx context.Context, cfg LatencyConfig) (Run, error) {
	if err := e.validate(); err != nil {
		return Run{}, err
	}
	if err := cfg.validate(); err != nil {
		return Run{}, err
	}
	log := e.Log.Named(cfg.Scenario).Named(cfg.Mode)
	n := int(math.Round(cfg.Rate * cfg.Duration.Seconds()))
	warm := max(cfg.Warmup, 0)
	k := cfg.EventsPerTx
	txs := (n + k - 1) / k
	ids := make([]uuid.UUID, n+warm)
	for i := range ids {
		ids[i] = outbox.NewID()
	}
	aggs := make([]string, cfg.Aggregates)
	for i := range aggs {
		aggs[i] = fmt.Sprintf("agg-%d", i)
	}
	body := payload(cfg.PayloadBytes)
	event := func(j int) outbox.Event {
		return outbox.Event{ID: ids[j], AggregateID: aggs[j%len(aggs)], Type: "bench.event", Payload: body}
	}

	run := Run{Scenario: cfg.Scenario, Mode: cfg.Mode, Latency: &Latency{
		Rate: cfg.Rate, WriterCount: cfg.Writers, EventsPerTx: k,
	}}
	if cfg.hasRelay() {
		run.PollIntervalMS = ms(cfg.Relay.PollInterval)
		if cfg.Mode != ModeNaive {
			run.LeaseMS = ms(cfg.Relay.Lease)
		}
		run.RelayDefaults = cfg.Relay.ProcDefaults && procMode(cfg.Mode)
		if cfg.Relays > 1 {
			run.LatencyRelays = cfg.Relays
		}
	}
	if cfg.Mode == ModeWritersOnly {
		run.WritersWakeup = cfg.wakeupName()
	}
	if plainSQL(cfg.Writer) {
		run.WriterKind = cfg.Writer
	}
	run.Round = cfg.Round

	var topic string
	if cfg.Mode != ModeWritersOnly {
		var err error
		if topic, err = e.freshTopic(ctx, cfg.Mode); err != nil {
			return run, err
		}
		defer e.dropTopic(topic)
	}
	var snd sender
	var counter *notifyCounter
	var rel runningRelay
	var db *runDB
	var probe *costProbe
	if cfg.Mode == ModeFloor {
		pub, err := produce.NewPublisher(kafka.Config{Brokers: e.Brokers, Topic: topic}, log)
		if err != nil {
			return run, err
		}
		defer pub.Close()
		snd = &kafkaSender{pub: pub}
	} else {
		var err error
		db, err = e.freshDB(ctx, int32(cfg.Writers+2))
		if err != nil {
			return run, err
		}
		defer db.Close()
		channel := db.Schema
		mode, after := cfg.writerWakeup()
		w, err := outbox.NewWriter(outbox.WriterConfig{Channel: channel, Wakeup: mode})
		if err != nil {
			return run, err
		}
		ds := &dbSender{db: db, writer: w}
		if after {
			ds.wake = newAfterCommitWaker(channel)
		}
		snd = ds
		if plainSQL(cfg.Writer) {
			snd = &sqlSender{db: db, channel: channel, all: cfg.Writer == WriterPlainSQLAll}
		}
		if cfg.Listen {
			l, err := startNotifyCounter(ctx, db, channel)
			if err != nil {
				return run, err
			}
			defer l.Stop() // on an early return
			counter = l
		}
		if err := warmPool(ctx, db, cfg.Writers); err != nil {
			return run, err
		}
		if !cfg.NoCost {
			if probe, err = e.openCostProbe(ctx); err != nil {
				return run, err
			}
			defer probe.Close()
		}
		if cfg.hasRelay() {
			rel, err = e.startRelays(ctx, db, topic, channel, cfg.Relay, cfg.Relays, log)
			if err != nil {
				return run, err
			}
			defer rel.Stop()
		}
	}
	var tr *tracker
	var floor *floorProbe
	if cfg.Mode != ModeWritersOnly {
		var err error
		if tr, err = startTracker(ctx, e.Brokers, topic, ids, log); err != nil {
			return run, err
		}
		defer tr.Stop()
		if cfg.FloorProbeRate > 0 {
			if floor, err = e.startFloorProbe(ctx, cfg.FloorProbeRate, floorProbeMax(cfg.FloorProbeRate, cfg.Duration), cfg.PayloadBytes, log); err != nil {
				return run, err
			}
			defer floor.close()
		}
	}

	// Warm-up: a few events through the whole path, not measured.
	if tr == nil {
		for j := n; j < n+warm; j++ {
			if err := snd.send(ctx, []outbox.Event{event(j)}); err != nil {
				return run, fmt.Errorf("bench: warm-up: %w", err)
			}
		}
	} else if err := warmUp(ctx, snd, tr, event, n, warm, 30*time.Second+2*cfg.Relay.PollInterval); err != nil {
		if perr := relayExited(rel); perr != nil {
			return run, perr
		}
		return run, err
	}
	if rel != nil && cfg.IdleWindow > 0 {
		// Skip the relay's linger tail after the warm-up (claims every
		// few ms for relay.Config.ClaimWindow): idle means no recent traffic.
		if err := waitCtx(ctx, idleSettle); err != nil {
			return run, err
		}
		s0 := rel.Stats()
		if err := waitCtx(ctx, cfg.IdleWindow); err != nil {
			return run, err
		}
		idle := rel.Stats().sub(s0)
		run.IdleClaimsPerS = float64(idle.Claims) / cfg.IdleWindow.Seconds()
		log.Info("idle", zap.Int64("claims", idle.Claims), zap.Int64("empty", idle.EmptyClaims), zap.Int64("published", idle.Published), zap.Int64("wake_notify", idle.WakeNotify), zap.Int64("wake_poll", idle.WakePoll), zap.Int64("wake_linger", idle.WakeWindow), zap.Int64("wake_backlog", idle.WakeBacklog))
		run.IdleWindowS = cfg.IdleWindow.Seconds()
	}

	var c0 costSample
	if probe != nil {
		// Everything the writers did so far is counted before c0.
		if _, err := probe.flushPool(ctx, db.Pool); err != nil {
			return run, err
		}
		var err error
		if c0, err = probe.Sample(ctx, 0); err != nil {
			return run, err
		}
		c0.relaySec = relayCPU(rel)
	}

	commitAt := make([]time.Time, n)
	var beganAt []time.Time
	if cfg.CheckOrder {
		beganAt = make([]time.Time, n)
	}
	var next, committed, txErrors atomic.Int64
	type writerHists struct{ lag, commit *hdrhistogram.Histogram }
	hists := make([]writerHists, cfg.Writers)
	interval := float64(k) / cfg.Rate // seconds between transactions
	var before relayStats
	var timings0 relayTimings
	if rel != nil {
		before = rel.Stats()
	}
	proc, _ := rel.(*relayProc)
	if proc != nil {
		timings0 = proc.Timings()
	}
	start := time.Now().Add(5 * time.Millisecond)
	if floor != nil {
		floor.begin(ctx, start) // with the writers
	}
	e.Progress.Begin(fmt.Sprintf("%s %s %g/s", cfg.Scenario, label(cfg), cfg.Rate), func() string {
		received := int64(0)
		if tr != nil {
			received = tr.Distinct() - int64(warm)
		}
		return fmt.Sprintf("sent %d/%d committed %d received %d errors %d",
			min(next.Load()*int64(k), int64(n)), n, committed.Load(), received, txErrors.Load())
	})
	defer e.Progress.End()
	var restartErr error
	restartDone := make(chan struct{})
	if g, ok := rel.(relayGroup); ok && cfg.RollingRestart > 0 {
		go func() {
			defer close(restartDone)
			run.Restarts, restartErr = e.rollingRestart(ctx, g, start, cfg, db, topic, db.Schema, log)
		}()
	} else {
		close(restartDone)
	}
	var wg sync.WaitGroup
	for w := range cfg.Writers {
		hists[w] = writerHists{NewHistogram(), NewHistogram()}
		wg.Add(1)
		go func(h writerHists) {
			defer wg.Done()
			evs := make([]outbox.Event, 0, k)
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(txs) {
					return
				}
				intended := start.Add(time.Duration(float64(i) * interval * float64(time.Second)))
				if d := time.Until(intended); d > 0 {
					time.Sleep(d)
				}
				began := time.Now()
				RecordDuration(h.lag, began.Sub(intended))
				evs = evs[:0]
				lo, hi := int(i)*k, min(int(i+1)*k, n)
				for j := lo; j < hi; j++ {
					evs = append(evs, event(j))
				}
				if err := snd.send(ctx, evs); err != nil {
					txErrors.Add(1)
					if ctx.Err() == nil {
						log.Warn("transaction failed", zap.Error(err))
					}
					continue
				}
				done := time.Now()
				RecordDuration(h.commit, done.Sub(began))
				ref := done // COMMIT returned: the event exists
				if cfg.Mode == ModeFloor {
					// No database: the broker hop starts when the
					// message is handed to the producer.
					ref = began
				}
				for j := lo; j < hi; j++ {
					commitAt[j] = ref
					if beganAt != nil {
						beganAt[j] = began
					}
				}
				committed.Add(int64(hi - lo))
			}
		}(hists[w])
	}
	wg.Wait()
	sendEnd := time.Now()
	<-restartDone
	var floorErr error
	if floor != nil {
		var fs Summary
		var sent, lost int64
		fs, sent, lost, floorErr = floor.finish(ctx, cfg.Grace)
		run.FloorRate, run.FloorCount, run.FloorLost = cfg.FloorProbeRate, fs.Count, lost
		run.FloorP50MS, run.FloorP99MS, run.FloorMaxMS = fs.P50, fs.P99, fs.Max
		if lost > 0 {
			log.Warn("floor probe records lost", zap.Int64("lost", lost), zap.Int64("sent", sent))
		}
	}
	measured := sendEnd
	if tr != nil {
		tr.waitFor(ctx, committed.Load()+int64(warm), cfg.Grace)
		measured = time.Now()
		if last := tr.lastRecv.Load(); last > 0 && time.Unix(0, last).After(sendEnd) {
			measured = time.Unix(0, last)
		}
	}
	var during relayStats
	if rel != nil {
		during = rel.Stats().sub(before)
	}
	if proc != nil {
		run.RelayTimings = proc.Timings().since(timings0)
	}
	e.Progress.End()
	var costErr error
	if probe != nil {
		var d costDelta
		if d, costErr = e.closeCostWindow(ctx, probe, c0, db, rel); costErr == nil {
			run.Cost = d.cost(committed.Load())
		}
	}
	if rel != nil {
		rel.Stop()
	}
	if tr != nil {
		tr.Stop()
	}
	if counter != nil {
		run.Notifications = counter.Stop()
	}
	if err := ctx.Err(); err != nil {
		return run, err
	}

	lat := NewHistogram()
	lag, commit := NewHistogram(), NewHistogram()
	for _, h := range hists {
		lag.Merge(h.lag)
		commit.Merge(h.commit)
	}
	for j := 0; j < n; j++ {
		if commitAt[j].IsZero() {
			continue
		}
		run.Committed++
		if tr == nil {
			continue
		}
		if tr.recv[j].IsZero() {
			run.Lost++
			continue
		}
		RecordDuration(lat, tr.recv[j].Sub(commitAt[j]))
	}
	s := Summarize(lat)
	run.Count = s.Count
	if tr != nil {
		run.Duplicates = tr.duplicates.Load()
	}
	run.Errors = txErrors.Load()
	run.MeanMS, run.P50MS, run.P90MS, run.P99MS, run.P999MS, run.MaxMS = s.Mean, s.P50, s.P90, s.P99, s.P999, s.Max
	ls, cs := Summarize(lag), Summarize(commit)
	run.LagP50MS, run.LagP99MS, run.LagMaxMS = ls.P50, ls.P99, ls.Max
	run.CommitP50MS, run.CommitP99MS = cs.P50, cs.P99
	sendSpan := sendEnd.Sub(start).Seconds()
	run.DurationS = sendSpan
	if sendSpan > 0 {
		run.AchievedRate = float64(run.Committed) / sendSpan
	}
	if span := measured.Sub(start).Seconds(); rel != nil && span > 0 && cfg.RollingRestart == 0 {
		run.ClaimsPerS = float64(during.Claims) / span
		run.EmptyClaimsPerS = float64(during.EmptyClaims) / span
		run.WakeNotify, run.WakePoll, run.WakeWindow, run.WakeBacklog = during.WakeNotify, during.WakePoll, during.WakeWindow, during.WakeBacklog
	}
	if tr != nil {
		run.CDF = CDF(lat, 200)
		run.hist = lat
	}
	if cfg.CheckOrder && tr != nil {
		v := orderViolations(cfg.Aggregates, beganAt, commitAt, tr.part[:n], tr.off[:n])
		run.OrderViolations = &v
	}
	if run.Lost > 0 {
		log.Warn("events lost", zap.Int64("lost", run.Lost), zap.Duration("grace", cfg.Grace))
	}
	if costErr == nil {
		costErr = floorErr
	}
	if costErr == nil {
		costErr = restartErr
	}
	return run, costErr
}

// closeCostWindow ends a cost window opened with c0: it reads the relay
// process's CPU time (if rel is one), stops rel and waits until its
// server processes have exited (they flush their statistics then),
// flushes the writers' pool, samples, and returns the window's figures.
func (e *Env) closeCostWindow(ctx context.Context, probe *costProbe, c0 costSample, db *runDB, rel runningRelay) (costDelta, error) {
	relaySec := relayCPU(rel)
	if rel != nil {
		pids, err := probe.backends(ctx, db.relayApp)
		if err != nil {
			return costDelta{}, err
		}
		rel.Stop()
		if err := probe.waitGone(ctx, pids, 20*time.Second); err != nil {
			return costDelta{}, err
		}
	}
	flushed, err := probe.flushPool(ctx, db.Pool)
	if err != nil {
		return costDelta{}, err
	}
	c1, err := probe.Sample(ctx, 0)
	if err != nil {
		return costDelta{}, err
	}
	c1.relaySec = relaySec
	return probe.delta(c0, c1, flushed), nil
}

// idleSettle is how long after the last event the idle claim rate starts
// being measured: longer than the relay's linger (relay.DefaultClaimWindow).
const idleSettle = 250 * time.Millisecond

// warmPool opens n connections so that connection set-up is not measured.
func warmPool(ctx context.Context, db *runDB, n int) error {
	var conns []interface{ Release() }
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range n {
		c, err := db.Pool.Acquire(ctx)
		if err != nil {
			return fmt.Errorf("bench: connect: %w", err)
		}
		conns = append(conns, c)
	}
	return nil
}

// label names a latency run in progress lines and tables, e.g.
// "poll(500ms)".
func label(cfg LatencyConfig) string {
	switch cfg.Mode {
	case ModePoll, ModeNaive:
		return fmt.Sprintf("%s(%s)", cfg.Mode, cfg.Relay.PollInterval)
	case ModeWritersOnly:
		return cfg.Mode + "(" + cfg.wakeupName() + ")"
	}
	return cfg.Mode
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// warmUp sends events n..n+warm-1, one per transaction, and waits up to
// timeout until the tracker received them all.
func warmUp(ctx context.Context, snd sender, tr *tracker, event func(int) outbox.Event, n, warm int, timeout time.Duration) error {
	for j := n; j < n+warm; j++ {
		if err := snd.send(ctx, []outbox.Event{event(j)}); err != nil {
			return fmt.Errorf("bench: warm-up: %w", err)
		}
	}
	if warm > 0 && !tr.waitFor(ctx, int64(warm), timeout) {
		return fmt.Errorf("bench: warm-up: %d of %d events arrived within %s", tr.Distinct(), warm, timeout)
	}
	return nil
}
