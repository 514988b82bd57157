package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox"
)

// ScenarioNotifyCost measures what waking the relay costs the writers and
// the database, with no relay: writers-only runs at each of
// SuiteConfig.NotifyCostRates with each writer wake-up mode (none,
// debounced, every-tx, after-commit) and a session LISTENing on the
// channel, as a relay's listener would. Its figures are the database CPU,
// transactions and WAL per commit, the commits/s reached and the commit
// time, against the run without wake-ups at the same rate.
const ScenarioNotifyCost = "notify-cost"

// afterCommitWaker is the after-commit wake-up the notify-cost and
// writers scenarios measure against the writer's own: after the business
// transaction committed, at most once per outbox.DefaultWakeupInterval
// (20ms) across all callers, one statement in a transaction of its own,
// with synchronous_commit off so that it does not hold PostgreSQL's
// notify commit lock while its commit record is flushed (a NOTIFY always
// gets a transaction ID and takes that lock in PreCommit_Notify,
// src/backend/commands/async.c). The writer API does not offer it: it
// measured no better than the in-transaction debounced wake-up
// (docs/benchmarks.md).
type afterCommitWaker struct {
	channel string
	last    atomic.Int64
}

func newAfterCommitWaker(channel string) *afterCommitWaker {
	return &afterCommitWaker{channel: channel}
}

// wake sends the wake-up through q (a pool or a connection outside any
// transaction) unless one was sent less than 20ms ago.
func (a *afterCommitWaker) wake(ctx context.Context, q outbox.Querier) error {
	now := time.Now().UnixNano()
	last := a.last.Load()
	if now-last < int64(outbox.DefaultWakeupInterval) || !a.last.CompareAndSwap(last, now) {
		return nil
	}
	if _, err := q.Exec(ctx, `SELECT pg_notify($1, '') FROM set_config('synchronous_commit', 'off', true)`, a.channel); err != nil {
		return fmt.Errorf("bench: wake after commit: %w", err)
	}
	return nil
}

// DefaultNotifyCostRates are SuiteConfig.NotifyCostRates' default, in
// commits per second (one event per transaction).
var DefaultNotifyCostRates = []float64{10, 1000, 10000}

// notifyCounter is a LISTEN session that counts the notifications it reads.
type notifyCounter struct {
	conn   *pgx.Conn
	cancel context.CancelFunc
	done   chan struct{}
	n      atomic.Int64
	once   sync.Once
}

// startNotifyCounter LISTENs on channel with a connection of db (its own,
// not the writers' pool) and counts notifications until Stop.
func startNotifyCounter(ctx context.Context, db *runDB, channel string) (*notifyCounter, error) {
	conn, err := pgx.ConnectConfig(ctx, db.Config.ConnConfig.Copy())
	if err != nil {
		return nil, fmt.Errorf("bench: listen: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		_ = conn.Close(ctx)
		return nil, fmt.Errorf("bench: listen: %w", err)
	}
	lctx, cancel := context.WithCancel(ctx)
	l := &notifyCounter{conn: conn, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for {
			if _, err := conn.WaitForNotification(lctx); err != nil {
				return
			}
			l.n.Add(1)
		}
	}()
	return l, nil
}

// Stop ends the session and returns the notifications read; later calls
// only return the count.
func (l *notifyCounter) Stop() int64 {
	l.once.Do(func() {
		l.cancel()
		<-l.done
		_ = l.conn.Close(context.Background())
	})
	return l.n.Load()
}
