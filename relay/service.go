package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/config"
	"github.com/pgoutbox/outbox/internal/listen"
	"github.com/pgoutbox/outbox/internal/produce"
	"github.com/pgoutbox/outbox/internal/serde"
	"github.com/pgoutbox/outbox/kafka"
	"github.com/pgoutbox/outbox/kafka/format"
	"github.com/pgoutbox/outbox/lease"
	"github.com/pgoutbox/outbox/notify"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

// ServiceConfig configures a Service: one Config per component. Zero values
// mean each component's defaults.
type ServiceConfig struct {
	// Relay configures the engine (topic, poll interval, retries, ...).
	Relay Config
	// Lease configures the claimer (table, lease, batch size, columns).
	Lease lease.Config
	// Kafka configures the publisher. Brokers is required; Topic defaults
	// to Relay.Topic; MaxAttempts and WriteTimeout, when zero, default to
	// what fits in half of Lease.Lease (3 attempts of 4s with the default
	// 30s lease; fewer and shorter ones with a shorter lease).
	Kafka kafka.Config
	// Notify configures the LISTEN connection. Ignored with NoNotify.
	Notify notify.Config
	// NoNotify runs the relay without LISTEN: it finds events by polling
	// every Relay.PollInterval. Defaults to false.
	NoNotify bool
	// ListenConnString is the connection string of the LISTEN session,
	// when it must not go where the pool goes (a transaction pooler such as
	// PgBouncer cannot carry LISTEN). Defaults to "" (the pool's own
	// connection configuration).
	ListenConnString string

	// Privileges are the relay's duties beside claiming, publishing and
	// marking whose privileges Run's start-up check covers too (retention's
	// DELETE, the held-snapshot watch's pg_read_all_stats): Run logs every
	// missing privilege in one line. Defaults to none.
	Privileges outboxsql.Needs

	// TracerProvider, if set, records OpenTelemetry spans of each event's
	// time in the outbox and of its publish attempts, children of the
	// writer's trace (NewTracingObserver: names, attributes, timing).
	// Defaults to nil: no spans, and the relay builds nothing for them.
	// outbox-relay run sets it from the standard OTEL_* environment
	// variables.
	TracerProvider trace.TracerProvider

	// WrapClaimer and WrapPublisher, if set, wrap what the relay calls
	// (instrumentation and fault-injection tests). Default to nil.
	WrapClaimer   func(Claimer) Claimer
	WrapPublisher func(Publisher) Publisher
}

// Service runs a relay in-process: the claimer on pool, the Kafka publisher,
// the LISTEN session (unless NoNotify) and the engine, started and stopped
// in the right order. It is the one place the relay is wired: the
// outbox-relay command, the development stack, the benchmark and the tests
// all use it.
type Service struct {
	relay      *Relay
	claimer    *claim.Claimer
	pub        *produce.Publisher
	listener   *listen.Listener
	pool       *pgxpool.Pool
	log        *zap.Logger
	privileges outboxsql.Needs

	closeOnce sync.Once
	closeErr  error
}

// NewService builds a Service on pool. It validates every component's
// configuration (a *outbox.FieldError names the bad field; a *BudgetError
// says one publish may outlast the lease) and connects to nothing: the
// relay and the listener reach PostgreSQL and Kafka when Run starts them,
// and retry with backoff while they cannot. An empty Relay.Topic is
// refused (a *outbox.FieldError naming relay Config.Topic) unless
// Relay.TopicTemplate routes events: every event of a row without a topic
// would fail to publish and count an attempt toward a dead letter.
// The LISTEN session turns off
// idle_session_timeout and idle_in_transaction_session_timeout for itself
// (see ConfigurePool, which does the same for a pool: call it on the
// pool's configuration). logger may be nil.
func NewService(pool *pgxpool.Pool, cfg ServiceConfig, logger *zap.Logger) (*Service, error) {
	if pool == nil {
		return nil, errors.New("relay: NewService: pool is nil")
	}
	if cfg.Relay.Topic == "" && cfg.Relay.TopicTemplate == "" {
		return nil, config.Invalid("relay", "Topic", "required: the topic of events whose row names none (or set Config.TopicTemplate to route them)")
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	if cfg.Kafka.Topic == "" {
		cfg.Kafka.Topic = cfg.Relay.Topic
	}
	claimer, err := claim.New(pool, cfg.Lease)
	if err != nil {
		return nil, err
	}
	pub, err := newPublisher(cfg.Kafka, cfg.Relay.Format, claimer, logger)
	if err != nil {
		return nil, err
	}
	s := &Service{claimer: claimer, pub: pub, pool: pool, log: logger, privileges: cfg.Privileges}
	var wake <-chan struct{}
	if !cfg.NoNotify {
		cc := pool.Config().ConnConfig
		if cfg.ListenConnString != "" {
			if cc, err = pgx.ParseConfig(cfg.ListenConnString); err != nil {
				_ = pub.Close()
				return nil, fmt.Errorf("relay: ServiceConfig.ListenConnString: %w", err)
			}
		}
		configureListener(cc)
		connect := func(ctx context.Context) (*pgx.Conn, error) { return pgx.ConnectConfig(ctx, cc.Copy()) }
		// A static member (RelayID set) keeps a session of its own on the
		// same direct connection string, whose end tells a later process
		// with its relay ID that this one is gone (claim.SetPresence).
		claimer.SetPresence(connect)
		if s.listener, err = listen.New(cfg.Notify, connect, pool, logger); err != nil {
			_ = pub.Close()
			return nil, err
		}
		// A notification that names key partitions wakes this relay
		// only if it owns one of them; a change of owners notifies every
		// relay, so that ownership moves at once all the same.
		s.listener.Wants = claimer.Wants
		wake = s.listener.Wake()
	}
	// Even without LISTEN, this relay's turns at the poll wake the other
	// relays' owners of what it finds (scheduler.pollInTurns).
	claimer.SetWakeChannel(cfg.Notify.WithDefaults().Channel)
	var c Claimer = claimer
	if cfg.WrapClaimer != nil {
		c = cfg.WrapClaimer(c)
	}
	var p Publisher = pub
	if cfg.WrapPublisher != nil {
		p = cfg.WrapPublisher(p)
	}
	if cfg.TracerProvider != nil {
		cfg.Relay.Observer = Observers(cfg.Relay.Observer, NewTracingObserver(cfg.TracerProvider))
	}
	if s.relay, err = New(cfg.Relay, c, p, wake, logger); err != nil {
		_ = pub.Close()
		return nil, err
	}
	if s.listener != nil {
		s.relay.untargeted = s.listener.Untargeted
		s.relay.wakeups = s.listener.Wakeups
		s.relay.listening = func() bool { return s.listener.State() == listen.StateListening }
	}
	return s, nil
}

// newPublisher returns the Service's publisher for claimer: its attempts
// fit in half the lease unless set (one publish must not outlive the
// claim of its rows; a *BudgetError if they cannot), and with
// kafka.Config.Fence it writes under the claimer's member's
// transactional IDs and fences the former owners of the key partitions
// the claimer takes over; with a Schema Registry format it encodes every
// value (serde.Encoder).
func newPublisher(cfg kafka.Config, fc format.Config, claimer *claim.Claimer, logger *zap.Logger) (*produce.Publisher, error) {
	enc, err := serde.New(fc, logger)
	if err != nil {
		return nil, err
	}
	lease := claimer.Config().Lease
	cfg.MaxAttempts, cfg.WriteTimeout = produce.FitAttempts(cfg.MaxAttempts, cfg.WriteTimeout, lease/2)
	if cfg.TransactionalIDPrefix == "" {
		cfg.TransactionalIDPrefix = kafka.DefaultTransactionalIDPrefix + claimer.Config().Table + "/"
	}
	pub, err := produce.NewPublisher(cfg, logger)
	if err != nil {
		return nil, err
	}
	if b := pub.AttemptBudget(); b > lease/2 {
		_ = pub.Close()
		return nil, &BudgetError{Budget: b, Lease: lease}
	}
	if cfg.Fence {
		pub.SetMember(claimer.Member())
		claimer.SetFencer(pub)
	}
	if enc != nil {
		pub.SetEncoder(enc)
	}
	return pub, nil
}

// Run relays until ctx is done, then stops gracefully and returns nil (or
// the listener's error if it failed for good). It first checks the outbox
// table and refuses, returning the error, one it must not relay: an
// UNLOGGED table or sequence (*outboxsql.UnloggedError: a crash empties
// it) or one whose UPDATEs fail for want of a replica identity
// (*outboxsql.ReplicaIdentityError); it logs in one line every privilege
// the role lacks (see ServiceConfig.Privileges). Order: the listener starts
// first and stops last, so that the relay never waits on a wake-up channel
// nobody feeds and no notification sent while the relay drains is lost;
// on ctx's end the relay stops claiming, finishes or gives back its batches
// within Config.ShutdownTimeout, then the listener stops and the publisher
// closes. Call Run once.
//
// Run first checks that the outbox table exists, as `outbox-relay run`
// does: a missing table returns at once an error that names it and
// sql.Migrate (claim.IsMissingTable reports it), instead of claims that
// fail and are retried forever. A database that does not answer yet is
// not an error: the relay retries.
func (s *Service) Run(ctx context.Context) error {
	defer s.Close()
	if err := s.checkTable(ctx); err != nil {
		return err
	}
	if err := s.checkAtStart(ctx); err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	s.pingRegistry(ctx)
	if s.listener == nil {
		return s.relay.Run(ctx)
	}
	lctx, stopListener := context.WithCancel(context.WithoutCancel(ctx))
	defer stopListener()
	lerr := make(chan error, 1)
	go func() { lerr <- s.listener.Run(lctx) }()
	err := s.relay.Run(ctx)
	stopListener()
	if lerrv := <-lerr; !errors.Is(lerrv, context.Canceled) && lerrv != nil && err == nil {
		err = lerrv
	}
	return err
}

// pingRegistry asks the Schema Registry, if the value format uses one,
// whether it answers: one that does not, or refuses the credentials, is
// logged once now (serde.Encoder logs the start and the end of an
// outage), and is an outage, not an error: events wait for it.
func (s *Service) pingRegistry(ctx context.Context) {
	if enc := s.pub.Encoder(); enc != nil {
		pctx, cancel := context.WithTimeout(ctx, DefaultDBTimeout)
		defer cancel()
		_ = enc.Ping(pctx)
	}
}

// checkTable returns an error when the claimer's table does not exist;
// nil when it does or when the database cannot tell now (the relay's own
// retries cover a database that is not up yet).
func (s *Service) checkTable(ctx context.Context) error {
	table := s.claimer.Config().Table
	cctx, cancel := context.WithTimeout(ctx, DefaultDBTimeout)
	defer cancel()
	q, err := checkTableSQL(table)
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(cctx, q)
	if claim.IsMissingTable(err) {
		return fmt.Errorf("relay: outbox table %q not found: create it with sql.Migrate (github.com/pgoutbox/outbox/sql; sql.MigrateTable for another name) or `outbox-relay migrate`: %w", table, err)
	}
	if err == nil {
		if err := claim.CheckPartitions(cctx, s.pool, table); errors.Is(err, claim.ErrNotMigrated) {
			return fmt.Errorf("relay: %w (sql.Migrate, or sql.Adopt for an adopted table)", err)
		}
	}
	return nil
}

// Close closes the publisher (Run does it on return). Safe to call more
// than once.
func (s *Service) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.pub.Close() })
	return s.closeErr
}

// Relay returns the engine (Stats, Health).
func (s *Service) Relay() *Relay { return s.relay }

// Claimer returns the lease store the relay claims with.
func (s *Service) Claimer() *claim.Claimer { return s.claimer }

// Publisher returns the Kafka publisher (Ping, CheckTopics). Its type is
// internal to the module: for outbox-relay and the project's tests.
func (s *Service) Publisher() *produce.Publisher { return s.pub }

// Registry returns the Schema Registry client (Ping, Stats), or nil when
// the value format uses none. Its type is internal to the module.
func (s *Service) Registry() *serde.Encoder { return s.pub.Encoder() }

// Listener returns the LISTEN session, or nil with NoNotify.
func (s *Service) Listener() *listen.Listener { return s.listener }
