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
	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/faultkit"
	"github.com/pgoutbox/outbox/internal/listen"
	"github.com/pgoutbox/outbox/internal/produce"
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
	OnPublished func([]claim.Row)
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
	Listener *listen.Listener
	Claimer  *claim.Claimer
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
		testenv.Eventually(t, 15*time.Second, func() bool { return h.Listener.State() == listen.StateListening }, "listener never connected")
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
func (s *ipSpyClaimer) Claim(ctx context.Context, marks ...*claim.Mark) (*claim.Batch, error) {
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

func (p *ipSpyPublisher) Publish(ctx context.Context, msgs []kafka.Message) []produce.Result {
	p.entered.Add(1)
	p.inflight.Add(1)
	defer p.inflight.Add(-1)
	return p.Publisher.Publish(ctx, msgs)
}

// ipLoad writes events continuously through a pool until stopped; writer
// errors (expected while the database restarts) are counted, not fatal.
type ipLoad = faultkit.Load

// ipStartLoad is faultkit.StartLoad.
func ipStartLoad(t testing.TB, pool *pgxpool.Pool, w *outbox.Writer, prefix string, aggregates, perTx int, interval time.Duration) *ipLoad {
	t.Helper()
	return faultkit.StartLoad(t, pool, w, prefix, aggregates, perTx, interval)
}

func ipCommit(ctx context.Context, pool *pgxpool.Pool, w *outbox.Writer, evs []outbox.Event) error {
	return faultkit.Commit(ctx, pool, w, evs)
}

func ipInsert(t testing.TB, pool *pgxpool.Pool, w *outbox.Writer, evs ...outbox.Event) {
	t.Helper()
	faultkit.Insert(t, pool, w, evs...)
}

func ipEvent(agg string, n int) outbox.Event { return faultkit.Event(agg, n) }

func ipCount(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	return faultkit.Count(t, pool, sql, args...)
}

func ipUnpublished(t testing.TB, pool *pgxpool.Pool) int {
	t.Helper()
	return faultkit.Unpublished(t, pool)
}

func ipPublished(t testing.TB, pool *pgxpool.Pool) int {
	t.Helper()
	return faultkit.Published(t, pool)
}

// ipLevel returns a pointer to l, for ipConfig.LogLevel.
func ipLevel(l zapcore.Level) *zapcore.Level { return &l }

func ipWait(timeout time.Duration, cond func() bool) bool { return faultkit.Wait(timeout, cond) }

// ipBug fails the test with a production bug it found. (These tests were
// written against bugs that are fixed now; they must stay fixed.)
func ipBug(t testing.TB, format string, args ...any) {
	t.Helper()
	t.Error("BUG: " + fmt.Sprintf(format, args...))
}
