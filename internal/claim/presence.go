package claim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// Presence: how a later incarnation of a static member (owner.go, TakeOver
// in sql/membership.sql) tells a process that is gone from one that is
// paused. A static member keeps a session of its own (SetPresence: a
// direct connection, never a pooled one) holding a session advisory lock
// named after its incarnation, and declares it in the order guard
// ('presence:<incarnation>', written with each Beat). When the process
// dies (SIGKILL, OOM kill, a crash), its server ends that session and the
// lock is free: the next incarnation's takeover ends its leases at once.
// A paused process (SIGSTOP, a GC pause, a frozen VM) keeps its session,
// so its leases stay until they end: it may wake up and publish them.
//
// Without a presence (none set, the connection goes through a transaction
// pooler, or it failed) nothing is declared and a takeover keeps every
// earlier lease until it ends: slower, never less safe.
//
// What the lock cannot tell: a process whose session its server ended
// while it lives on (a network partition between it and the database that
// the server's TCP keepalive detected, pg_terminate_backend) looks gone.
// The process then withdraws its declaration as soon as it sees its
// session end; a later incarnation started before that ends its leases.

// presenceRetry is how long a presence waits before a new session after
// one ended or failed.
const presenceRetry = time.Second

// errPooledPresence: the presence connection reached a pooler, not one
// server session, so its lock would prove nothing.
var errPooledPresence = errors.New("presence: the connection goes through a pooler (the backend's PID is not the one announced at connect)")

type presence struct {
	connect func(ctx context.Context) (*pgx.Conn, error)
	key     string
	// held: the session holds the lock; declared: the last Beat declared
	// it (Declare) and no Undeclare followed.
	held, declared atomic.Bool
	once           sync.Once
	cancel         context.CancelFunc
	done           chan struct{}
	err            atomic.Pointer[string]
}

// SetPresence gives a static member (lease.Config.RelayID set) a presence:
// connect opens a session straight to PostgreSQL (not through a
// transaction pooler) that the Claimer keeps for its lifetime. Call it
// before the first claim; without it, or on a Claimer that is not static,
// it does nothing.
func (c *Claimer) SetPresence(connect func(ctx context.Context) (*pgx.Conn, error)) {
	if !c.own.static || connect == nil {
		return
	}
	c.pres = &presence{connect: connect, key: "pgoutbox presence " + c.cfg.Table + " " + c.own.incarnation, done: make(chan struct{})}
}

// PresenceErr is why the presence session failed last, "" if it did not
// (or there is none).
func (c *Claimer) PresenceErr() string {
	if c.pres == nil {
		return ""
	}
	if p := c.pres.err.Load(); p != nil {
		return *p
	}
	return ""
}

// declaring reports whether a Beat should declare the presence.
func (p *presence) declaring() bool { return p != nil && p.held.Load() }

// due reports whether the presence is held but not declared yet.
func (p *presence) due() bool { return p != nil && p.held.Load() && !p.declared.Load() }

// start starts the presence session, once.
func (p *presence) start(c *Claimer) {
	if p == nil {
		return
	}
	p.once.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		p.cancel = cancel
		go p.run(ctx, c)
	})
}

// stop ends the presence session and waits for it.
func (p *presence) stop() {
	if p == nil {
		return
	}
	p.once.Do(func() { close(p.done) }) // never started
	if p.cancel != nil {
		p.cancel()
		<-p.done
	}
}

func (p *presence) run(ctx context.Context, c *Claimer) {
	defer close(p.done)
	for {
		err := p.session(ctx)
		p.held.Store(false)
		if p.declared.Swap(false) {
			uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			q := c.st.undeclare
			_, _ = c.pool.Exec(uctx, q.SQL, q.Args(incarnationArgs{Incarnation: c.own.incarnation})...)
			cancel()
		}
		if ctx.Err() != nil {
			return
		}
		msg := err.Error()
		p.err.Store(&msg)
		if errors.Is(err, errPooledPresence) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(presenceRetry):
		}
	}
}

// session holds the presence lock on one connection until it ends.
func (p *presence) session(ctx context.Context) error {
	conn, err := p.connect(ctx)
	if err != nil {
		return fmt.Errorf("presence: connect: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = conn.Close(cctx)
		cancel()
	}()
	var pid uint32
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		return fmt.Errorf("presence: %w", err)
	}
	if pid != conn.PgConn().PID() {
		return errPooledPresence
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(hashtextextended($1::text, 0))", p.key); err != nil {
		return fmt.Errorf("presence: lock: %w", err)
	}
	p.held.Store(true)
	// Blocks reading the session until the server ends it (or ctx).
	_, err = conn.WaitForNotification(ctx)
	return fmt.Errorf("presence: session ended: %w", err)
}
