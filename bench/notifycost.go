package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// ScenarioNotifyCost measures what waking the relay costs the writers and
// the database, with no relay: writers-only runs at each of
// SuiteConfig.NotifyCostRates with each writer wake-up mode (none,
// debounced, every-tx, after-commit) and a session LISTENing on the
// channel, as a relay's listener would. Its figures are the database CPU,
// transactions and WAL per commit, the commits/s reached and the commit
// time, against the run without wake-ups at the same rate.
const ScenarioNotifyCost = "notify-cost"

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
