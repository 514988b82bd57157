package faults

// Harness of the in-process fault tests (inproc_*_test.go): a relay with its
// listener, publisher and claimer running in the test process, so that the
// tests can wrap its claimer and publisher, read its Stats, cancel its
// context and share kfake's hooks with it. Everything here is prefixed "ip"
// to stay out of the way of the subprocess tests' helpers.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/kafka"
	"github.com/pgoutbox/outbox/lease"
	"github.com/pgoutbox/outbox/notify"
	"github.com/pgoutbox/outbox/relay"
)

// ipConfig configures ipStartRelay. The zero value is a relay with its
// listener on the test schema's channel (the writers of writer() notify
// there), default relay, lease and publisher settings (the publisher's
// attempts fit in half the lease), info-level logs.
type ipConfig struct {
	Relay relay.Config
	Lease lease.Config
	// Kafka edits the publisher's configuration.
	Kafka func(*kafka.Config)
	// NoNotify runs the relay without a listener (poll only).
	NoNotify bool
	// Notify is the listener's configuration; Channel defaults to the
	// test schema, PingInterval to 500ms, PingTimeout to 2s.
	Notify notify.Config
	// Pool is the relay's pool (claimer and watchdog pings); defaults to
	// the test database's pool. ConnString is the listener's; defaults to
	// the test database's.
	Pool       *pgxpool.Pool
	ConnString string
	// OnPublished is set as the relay's OnPublished hook.
	OnPublished func([]lease.Row)
	// WrapClaimer and WrapPublisher may wrap what the relay calls.
	WrapClaimer   func(relay.Claimer) relay.Claimer
	WrapPublisher func(relay.Publisher) relay.Publisher
	// LogLevel of the relay's logs (through t.Log); defaults to info.
	LogLevel *zapcore.Level
	// Logger, if set, replaces the test logger (tests that count lines).
	Logger *zap.Logger
	// NoWaitListening starts the relay without waiting for LISTEN.
	NoWaitListening bool
}

// ipRelay is one in-process relay.
type ipRelay struct {
	t        testing.TB
	Relay    *relay.Relay
	Listener *notify.Listener
	Claimer  *lease.Claimer
	RelayID  string
	// Holder is what the relay writes to locked_by (RelayID plus a
	// per-instance suffix).
	Holder string

	cancel    context.CancelFunc
	cancelled atomic.Int64 // unix nanos of the cancel
	runDone   chan struct{}
	// runReturn is when Run returned (unix nanos): the relay, its
	// listener and its publisher stopped (relay.Service.Run).
	runReturn  atomic.Int64
	done       chan struct{}
	stopOnce   sync.Once
	stopResult time.Duration
}

func ipLogLevel(l *zapcore.Level) zapcore.Level {
	if l == nil {
		return zapcore.InfoLevel
	}
	return *l
}

// ipStartRelay starts a relay (relay.Service) on db (its pool and schema)
// publishing to topic on brokers, and stops it gracefully when the test
// ends.
func ipStartRelay(t testing.TB, db *testenv.TestDB, brokers []string, topic string, c ipConfig) *ipRelay {
	t.Helper()
	log := zaptest.NewLogger(t, zaptest.Level(ipLogLevel(c.LogLevel)))
	if c.Logger != nil {
		log = c.Logger
	}
	h := &ipRelay{t: t, runDone: make(chan struct{}), done: make(chan struct{})}
	cfg := relay.ServiceConfig{
		Relay: c.Relay, Lease: c.Lease, NoNotify: c.NoNotify, Notify: c.Notify, ListenConnString: c.ConnString,
		Kafka:       kafka.Config{Brokers: brokers},
		WrapClaimer: c.WrapClaimer, WrapPublisher: c.WrapPublisher,
	}
	cfg.Relay.Topic = topic
	if c.OnPublished != nil {
		cfg.Relay.Observer = relay.Observers(cfg.Relay.Observer, relay.ObserverFuncs{OnPublished: c.OnPublished})
	}
	if c.Kafka != nil {
		c.Kafka(&cfg.Kafka)
	}
	if cfg.Notify.Channel == "" {
		cfg.Notify.Channel = db.Schema
	}
	if cfg.Notify.PingInterval == 0 {
		cfg.Notify.PingInterval = 500 * time.Millisecond
	}
	if cfg.Notify.PingTimeout == 0 {
		cfg.Notify.PingTimeout = 2 * time.Second
	}
	if cfg.ListenConnString == "" {
		cfg.ListenConnString = db.ConnString
	}
	pool := c.Pool
	if pool == nil {
		pool = db.Pool
	}
	svc, err := relay.NewService(pool, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	h.Relay, h.Listener, h.Claimer = svc.Relay(), svc.Listener(), svc.Claimer()
	h.RelayID = h.Claimer.Config().RelayID
	h.Holder = h.Claimer.Holder()

	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() {
		// Service.Run returns once the relay stopped, the listener stopped
		// and the publisher closed.
		_ = svc.Run(ctx)
		h.runReturn.Store(time.Now().UnixNano())
		close(h.runDone)
		close(h.done)
	}()
	t.Cleanup(func() { h.Stop() })
	if h.Listener != nil && !c.NoWaitListening {
		testenv.Eventually(t, 15*time.Second, func() bool { return h.Listener.State() == notify.StateListening }, "listener never connected")
	}
	return h
}

// Cancel cancels the relay's context (the in-process SIGTERM) and returns
// at once.
func (h *ipRelay) Cancel() {
	h.cancelled.CompareAndSwap(0, time.Now().UnixNano())
	h.cancel()
}

// Stop cancels the relay and waits for it and its listener and publisher to
// stop; it returns how long Run took to return after the cancel. It fails
// the test after 30s.
func (h *ipRelay) Stop() time.Duration {
	h.stopOnce.Do(func() {
		h.Cancel()
		select {
		case <-h.done:
		case <-time.After(30 * time.Second):
			h.t.Errorf("relay %s did not stop within 30s", h.RelayID)
		}
		if r := h.runReturn.Load(); r != 0 {
			h.stopResult = time.Duration(r - h.cancelled.Load())
		}
	})
	return h.stopResult
}

// Done is closed when the relay, its listener and its publisher stopped.
func (h *ipRelay) Done() <-chan struct{} { return h.done }

// RunDone is closed when Run returned (the same moment as Done, since
// relay.Service.Run closes the publisher before it returns).
func (h *ipRelay) RunDone() <-chan struct{} { return h.runDone }

// ipSpyClaimer records the relay's marks.
type ipSpyClaimer struct {
	relay.Claimer
	mu    sync.Mutex
	marks []ipMark
}

type ipMark struct {
	token uuid.UUID
	ids   int
	n     int64
	err   error
}

func (s *ipSpyClaimer) MarkPublished(ctx context.Context, token uuid.UUID, seqs []int64) (int64, error) {
	n, err := s.Claimer.MarkPublished(ctx, token, seqs)
	s.mu.Lock()
	s.marks = append(s.marks, ipMark{token: token, ids: len(seqs), n: n, err: err})
	s.mu.Unlock()
	return n, err
}

// Claim records the marks the claim carries (the relay marks delivered
// chunks in its next claim's transaction when one comes soon enough).
func (s *ipSpyClaimer) Claim(ctx context.Context, marks ...*lease.Mark) (*lease.Batch, error) {
	b, err := s.Claimer.Claim(ctx, marks...)
	s.mu.Lock()
	for _, m := range marks {
		s.marks = append(s.marks, ipMark{token: m.Token, ids: len(m.Seqs), n: m.Marked, err: err})
	}
	s.mu.Unlock()
	return b, err
}

// Marks returns the marks so far, alone or carried by a claim.
func (s *ipSpyClaimer) Marks() []ipMark {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ipMark(nil), s.marks...)
}

// ipSpyPublisher counts Publish calls in flight.
type ipSpyPublisher struct {
	relay.Publisher
	entered  atomic.Int64
	inflight atomic.Int64
}

func (p *ipSpyPublisher) Publish(ctx context.Context, msgs []kafka.Message) error {
	p.entered.Add(1)
	p.inflight.Add(1)
	defer p.inflight.Add(-1)
	return p.Publisher.Publish(ctx, msgs)
}

// ipLoad writes events continuously through a pool until stopped; writer
// errors (expected while the database restarts) are counted, not fatal.
type ipLoad struct {
	cancel context.CancelFunc
	done   chan struct{}

	committed atomic.Int64
	failed    atomic.Int64

	mu      sync.Mutex
	ids     []uuid.UUID // events whose transaction's Commit returned nil
	lastErr error
}

// ipStartLoad commits a transaction of perTx events every interval, spread
// round-robin over aggregates "<prefix>-0".."<prefix>-(aggregates-1)".
func ipStartLoad(t testing.TB, pool *pgxpool.Pool, w *outbox.Writer, prefix string, aggregates, perTx int, interval time.Duration) *ipLoad {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &ipLoad{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		n := 0
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			evs := make([]outbox.Event, perTx)
			for i := range evs {
				agg := fmt.Sprintf("%s-%d", prefix, n%aggregates)
				evs[i] = outbox.Event{ID: outbox.NewID(), AggregateID: agg, Type: "fault.load", Payload: eventPayload(n, agg)}
				n++
			}
			if err := ipCommit(ctx, pool, w, evs); err != nil {
				if ctx.Err() != nil {
					return
				}
				l.failed.Add(1)
				l.mu.Lock()
				l.lastErr = err
				l.mu.Unlock()
				continue
			}
			l.mu.Lock()
			for _, e := range evs {
				l.ids = append(l.ids, e.ID)
			}
			l.mu.Unlock()
			l.committed.Add(int64(len(evs)))
		}
	}()
	t.Cleanup(l.Stop)
	return l
}

// Stop stops the load and waits for its last transaction.
func (l *ipLoad) Stop() {
	l.cancel()
	<-l.done
}

// LastErr returns the last writer error.
func (l *ipLoad) LastErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastErr
}

// IDs returns the IDs of the events whose commit succeeded.
func (l *ipLoad) IDs() []uuid.UUID {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]uuid.UUID(nil), l.ids...)
}

func ipCommit(ctx context.Context, pool *pgxpool.Pool, w *outbox.Writer, evs []outbox.Event) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	if err := w.Add(ctx, tx, evs...); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	return tx.Commit(ctx)
}

// ipInsert commits evs in one transaction, failing the test on error.
func ipInsert(t testing.TB, pool *pgxpool.Pool, w *outbox.Writer, evs ...outbox.Event) {
	t.Helper()
	if err := ipCommit(context.Background(), pool, w, evs); err != nil {
		t.Fatalf("insert events: %v", err)
	}
}

// ipEvent is the n-th test event of aggregate agg.
func ipEvent(agg string, n int) outbox.Event {
	return outbox.Event{ID: outbox.NewID(), AggregateID: agg, Type: "fault.test", Payload: eventPayload(n, agg)}
}

// ipCount runs a count query and returns its result.
func ipCount(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func ipUnpublished(t testing.TB, pool *pgxpool.Pool) int {
	t.Helper()
	return ipCount(t, pool, "SELECT count(*) FROM outbox WHERE published_at IS NULL")
}

func ipPublished(t testing.TB, pool *pgxpool.Pool) int {
	t.Helper()
	return ipCount(t, pool, "SELECT count(*) FROM outbox WHERE published_at IS NOT NULL")
}

// ipLevel returns a pointer to l, for ipConfig.LogLevel.
func ipLevel(l zapcore.Level) *zapcore.Level { return &l }

// ipWait polls cond until it is true or timeout passes, and reports which;
// for conditions whose failure the test reports itself and goes on.
func ipWait(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	interval := 2 * time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
		interval = min(2*interval, 50*time.Millisecond)
	}
	return true
}

// ipBug fails the test with a production bug it found. (These tests were
// written against bugs that are fixed now; they must stay fixed.)
func ipBug(t testing.TB, format string, args ...any) {
	t.Helper()
	t.Error("BUG: " + fmt.Sprintf(format, args...))
}
