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
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox/internal/listen"
	"github.com/pgoutbox/outbox/internal/produce"
	"github.com/pgoutbox/outbox/kafka"
	"github.com/pgoutbox/outbox/lease"
	"github.com/pgoutbox/outbox/notify"
	"github.com/pgoutbox/outbox/relay"
)

// RelayConfig configures the relay under test in one run.
type RelayConfig struct {
	// Mode is ModeNotify, ModePoll, ModeNaive, ModeNotifyProc (the
	// notify relay as an `outbox-relay run` process, Env.RelayBin),
	// ModeNotifyProcB (the same with Env.RelayBinB) or
	// ModeNotifyEveryTx (the same process, its claim window off whatever
	// ClaimWindow says). Required.
	Mode string
	// PollInterval is the relay's poll interval (notify: the fallback
	// poll). Defaults to 500ms.
	PollInterval time.Duration
	// Lease is the claim lease (notify and poll). Defaults to 30s
	// (lease.DefaultLease).
	Lease time.Duration
	// BatchSize is the most rows per claim. Defaults to 500
	// (lease.DefaultBatchSize).
	BatchSize int
	// ClaimWindow is relay.Config.ClaimWindow (notify and poll): 0 keeps the
	// relay's default (relay.DefaultClaimWindow), negative disables it.
	ClaimWindow time.Duration
	// ClaimWindowPoll is relay.Config.ClaimWindowPoll (notify and poll): 0
	// keeps the relay's default (relay.DefaultClaimWindowPoll).
	ClaimWindowPoll time.Duration
	// BusyClaimInterval is relay.Config.BusyClaimInterval (notify, poll and
	// notify-proc, even with ProcDefaults): 0 keeps the relay's default
	// (relay.DefaultBusyClaimInterval).
	BusyClaimInterval time.Duration
	// ProcDefaults runs a relay process (ModeNotifyProc, ModeNotifyProcB,
	// ModeNotifyEveryTx) with the relay's own defaults: PollInterval,
	// Lease, BatchSize and ClaimWindow are not passed on (but
	// ModeNotifyEveryTx's --claim-window off), and the retention cleaner
	// runs with its default.
	// Defaults to false: the process gets the same settings as the
	// in-process relay, retention off.
	ProcDefaults bool
	// RelayID is a relay process's --relay-id (its member name, as a
	// pod's name); startRelays gives relay i of several RelayID-<i>.
	// Defaults to "": the relay's default (<hostname>-<random>).
	RelayID string
}

// memberID is the --relay-id of relay i of a group started with cfg
// (startRelays): cfg.RelayID-<i>, "" without a RelayID.
func (c RelayConfig) memberID(i int) string {
	if c.RelayID == "" {
		return ""
	}
	return fmt.Sprintf("%s-%d", c.RelayID, i)
}

func (c *RelayConfig) validate() error {
	switch c.Mode {
	case ModeNotify, ModePoll, ModeNaive, ModeNotifyProc, ModeNotifyProcB, ModeNotifyEveryTx:
	default:
		return fmt.Errorf("bench: RelayConfig.Mode: %q is not notify, poll, naive, notify-proc, notify-proc-b or notify-every-tx", c.Mode)
	}
	if c.ProcDefaults {
		c.PollInterval, c.Lease, c.BatchSize, c.ClaimWindow, c.ClaimWindowPoll = relay.DefaultPollInterval, lease.DefaultLease, lease.DefaultBatchSize, 0, 0
	}
	if c.Mode == ModeNotifyEveryTx {
		c.ClaimWindow = claimWindowOff
	}
	if c.PollInterval == 0 {
		c.PollInterval = 500 * time.Millisecond
	}
	if c.Lease == 0 {
		c.Lease = lease.DefaultLease
	}
	if c.BatchSize == 0 {
		c.BatchSize = lease.DefaultBatchSize
	}
	switch {
	case c.PollInterval < time.Millisecond:
		return fmt.Errorf("bench: RelayConfig.PollInterval: must be at least 1ms, got %s", c.PollInterval)
	case c.Lease < time.Second:
		return fmt.Errorf("bench: RelayConfig.Lease: must be at least 1s, got %s", c.Lease)
	case c.BatchSize < 1 || c.BatchSize > lease.MaxBatchSize:
		return fmt.Errorf("bench: RelayConfig.BatchSize: must be 1..%d, got %d", lease.MaxBatchSize, c.BatchSize)
	}
	return nil
}

// claimWindowOff is RelayConfig.ClaimWindow (and the relay's
// --claim-window) in ModeNotifyEveryTx: negative, so that the relay
// neither lingers after a claim that found events nor claims on the busy
// schedule (relay.Config.ClaimWindow).
const claimWindowOff = -time.Millisecond

// procMode reports whether mode runs the relay as an `outbox-relay run`
// process (Env.RelayBin; Env.RelayBinB for ModeNotifyProcB).
func procMode(mode string) bool { return notifyProc(mode) || mode == ModeNotifyEveryTx }

// notifyProc reports whether mode is notify-proc or its twin
// notify-proc-b, which differ only in the binary they run.
func notifyProc(mode string) bool { return mode == ModeNotifyProc || mode == ModeNotifyProcB }

// relayStats are the counters the report needs from any relay.
type relayStats struct {
	Claims, EmptyClaims, Published                int64
	WakeNotify, WakePoll, WakeWindow, WakeBacklog int64
}

func (a relayStats) add(b relayStats) relayStats {
	return relayStats{
		Claims: a.Claims + b.Claims, EmptyClaims: a.EmptyClaims + b.EmptyClaims, Published: a.Published + b.Published,
		WakeNotify: a.WakeNotify + b.WakeNotify, WakePoll: a.WakePoll + b.WakePoll,
		WakeWindow: a.WakeWindow + b.WakeWindow, WakeBacklog: a.WakeBacklog + b.WakeBacklog,
	}
}

func (a relayStats) sub(b relayStats) relayStats {
	return relayStats{
		Claims: a.Claims - b.Claims, EmptyClaims: a.EmptyClaims - b.EmptyClaims, Published: a.Published - b.Published,
		WakeNotify: a.WakeNotify - b.WakeNotify, WakePoll: a.WakePoll - b.WakePoll,
		WakeWindow: a.WakeWindow - b.WakeWindow, WakeBacklog: a.WakeBacklog - b.WakeBacklog,
	}
}

// runningRelay is a relay under test: in this process, or a relay process
// (*relayProc).
type runningRelay interface {
	Stats() relayStats
	// Stop stops the relay gracefully and releases its resources; its
	// database connections are closed when it returns.
	Stop()
}

// relayGroup is several relays on one table (LatencyConfig.Relays).
type relayGroup []runningRelay

// Stats adds up the relays' counters.
func (g relayGroup) Stats() relayStats {
	var sum relayStats
	for _, r := range g {
		sum = sum.add(r.Stats())
	}
	return sum
}

// Stop stops the relays at once, each gracefully, and returns when all
// have stopped.
func (g relayGroup) Stop() {
	var wg sync.WaitGroup
	for _, r := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.Stop()
		}()
	}
	wg.Wait()
}

// relayCPU is the CPU seconds used so far by rel's processes (a relay
// process or a group of them), NaN for a relay in the bench process.
func relayCPU(rel runningRelay) float64 {
	switch r := rel.(type) {
	case *relayProc:
		if v, err := r.CPUSeconds(); err == nil {
			return v
		}
	case relayGroup:
		sum := 0.0
		for _, m := range r {
			sum += relayCPU(m)
		}
		return sum
	}
	return math.NaN()
}

// relayExited returns the exit error of a relay process of rel that has
// exited, or nil.
func relayExited(rel runningRelay) error {
	switch r := rel.(type) {
	case *relayProc:
		return r.Exited()
	case relayGroup:
		for _, m := range r {
			if err := relayExited(m); err != nil {
				return err
			}
		}
	}
	return nil
}

// startRelays starts n relays of cfg on db (see startRelay); with more
// than one it waits until they are all live members and own the key
// partitions as ownership.Assign gives them, and returns them as a
// relayGroup.
func (e *Env) startRelays(ctx context.Context, db *runDB, topic, channel string, cfg RelayConfig, n int, log *zap.Logger) (runningRelay, error) {
	if n <= 1 {
		cfg.RelayID = cfg.memberID(0)
		return e.startRelay(ctx, db, topic, channel, cfg, log)
	}
	var g relayGroup
	for i := range n {
		rc := cfg
		rc.RelayID = cfg.memberID(i)
		r, err := e.startRelay(ctx, db, topic, channel, rc, log.Named(fmt.Sprint(i)))
		if err != nil {
			g.Stop()
			return nil, err
		}
		g = append(g, r)
	}
	if err := waitSettled(ctx, db, n, time.Minute, func() error { return relayExited(g) }); err != nil {
		g.Stop()
		return nil, err
	}
	return g, nil
}

// startRelay starts one relay of cfg.Mode on db, publishing to topic;
// its database connections are named db.relayApp. channel is the NOTIFY
// channel (notify modes). A notify-proc, notify-proc-b or notify-every-tx
// relay is an `outbox-relay run` process (Env.RelayBin, Env.RelayBinB); startRelay returns once it
// runs and listens.
func (e *Env) startRelay(ctx context.Context, db *runDB, topic, channel string, cfg RelayConfig, log *zap.Logger) (runningRelay, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if procMode(cfg.Mode) {
		p, err := e.startRelayProc(db, topic, channel, cfg, log)
		if err != nil {
			return nil, err
		}
		if err := p.waitReady(ctx, 60*time.Second); err != nil {
			p.Stop()
			return nil, err
		}
		return p, nil
	}
	pool, err := db.newPoolApp(ctx, 4, db.relayApp)
	if err != nil {
		return nil, err
	}
	if cfg.Mode == ModeNaive {
		pub, err := produce.NewPublisher(kafka.Config{Brokers: e.Brokers, Topic: topic}, log)
		if err != nil {
			pool.Close()
			return nil, err
		}
		n := &naiveRelay{pool: pool, pub: pub, batch: cfg.BatchSize, poll: cfg.PollInterval, log: log.Named("naive"), done: make(chan struct{})}
		rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		n.cancel = cancel
		go n.run(rctx)
		return n, nil
	}
	svc, err := relay.NewService(pool, relay.ServiceConfig{
		Relay:    relay.Config{Topic: topic, PollInterval: cfg.PollInterval, ClaimWindow: cfg.ClaimWindow, ClaimWindowPoll: cfg.ClaimWindowPoll, BusyClaimInterval: cfg.BusyClaimInterval},
		Lease:    lease.Config{Lease: cfg.Lease, BatchSize: cfg.BatchSize},
		Kafka:    kafka.Config{Brokers: e.Brokers},
		Notify:   notify.Config{Channel: channel},
		NoNotify: cfg.Mode != ModeNotify,
	}, log)
	if err != nil {
		pool.Close()
		return nil, err
	}
	p := &productRelay{svc: svc, pool: pool, done: make(chan struct{})}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p.cancel = cancel
	go func() {
		defer close(p.done)
		_ = svc.Run(rctx)
	}()
	if l := svc.Listener(); l != nil {
		// Start measuring once LISTEN is active, as a production relay
		// would be long before the first event.
		deadline := time.Now().Add(10 * time.Second)
		for l.State() != listen.StateListening {
			if time.Now().After(deadline) {
				p.Stop()
				return nil, errors.New("bench: notify listener did not start listening within 10s")
			}
			time.Sleep(time.Millisecond)
		}
	}
	return p, nil
}

// productRelay is the product's relay.Service.
type productRelay struct {
	svc    *relay.Service
	pool   *pgxpool.Pool
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

func (p *productRelay) Stats() relayStats {
	s := p.svc.Relay().Stats()
	return relayStats{
		Claims: s.Claims, EmptyClaims: s.EmptyClaims, Published: s.Published,
		WakeNotify: s.WakeNotify, WakePoll: s.WakePoll, WakeWindow: s.WakeWindow, WakeBacklog: s.WakeBacklog,
	}
}

func (p *productRelay) Stop() {
	p.once.Do(func() {
		p.cancel()
		<-p.done
		p.pool.Close()
	})
}

// naiveRelay is the polling relay users write by hand: one transaction
// selects a batch of unpublished rows FOR UPDATE SKIP LOCKED, publishes it
// with kafka-go, marks it published and commits; when a poll finds nothing
// it sleeps for the poll interval. It uses the product's produce.Publisher
// (kafka-go, acks=all, same batching settings), so the comparison isolates
// the relay design from the Kafka client.
type naiveRelay struct {
	pool   *pgxpool.Pool
	pub    *produce.Publisher
	batch  int
	poll   time.Duration
	log    *zap.Logger
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once

	claims, empty, published, polls atomic.Int64
}

const naiveSelect = `SELECT id, aggregate_id, event_type, payload::text, headers::text, topic
FROM outbox WHERE published_at IS NULL ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED`

const naiveMark = `UPDATE outbox SET published_at = now() WHERE id = ANY($1)`

func (n *naiveRelay) run(ctx context.Context) {
	defer close(n.done)
	for ctx.Err() == nil {
		got, err := n.once1(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			n.log.Warn("poll failed", zap.Error(err))
		}
		if got == 0 || err != nil {
			n.polls.Add(1)
			select {
			case <-ctx.Done():
				return
			case <-time.After(n.poll):
			}
		}
	}
}

// once1 runs one select-publish-mark transaction and returns the rows
// published.
func (n *naiveRelay) once1(ctx context.Context) (int, error) {
	tx, err := n.pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	rows, err := tx.Query(ctx, naiveSelect, n.batch)
	n.claims.Add(1)
	if err != nil {
		return 0, err
	}
	var ids []uuid.UUID
	var msgs []kafka.Message
	for rows.Next() {
		var id uuid.UUID
		var agg, typ string
		var payload, headers, topic *string
		if err := rows.Scan(&id, &agg, &typ, &payload, &headers, &topic); err != nil {
			rows.Close()
			return 0, err
		}
		m := kafka.Message{Key: []byte(agg), Headers: []kafka.Header{
			{Key: "event_id", Value: []byte(id.String())},
			{Key: "event_type", Value: []byte(typ)},
			{Key: "aggregate_id", Value: []byte(agg)},
		}}
		if payload != nil {
			m.Value = []byte(*payload)
		}
		if topic != nil {
			m.Topic = *topic
		}
		ids = append(ids, id)
		msgs = append(msgs, m)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		n.empty.Add(1)
		return 0, tx.Commit(ctx)
	}
	if err := n.pub.Send(ctx, msgs); err != nil {
		return 0, err // rolled back: everything is published again
	}
	n.published.Add(int64(len(ids)))
	if _, err := tx.Exec(ctx, naiveMark, ids); err != nil {
		return 0, err
	}
	return len(ids), tx.Commit(ctx)
}

func (n *naiveRelay) Stats() relayStats {
	return relayStats{Claims: n.claims.Load(), EmptyClaims: n.empty.Load(), Published: n.published.Load(), WakePoll: n.polls.Load()}
}

func (n *naiveRelay) Stop() {
	n.once.Do(func() {
		n.cancel()
		<-n.done
		_ = n.pub.Close()
		n.pool.Close()
	})
}
