package faultkit

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/checker"
)

// Writer returns an outbox writer that notifies on the channel the relays
// of StartRelay listen on (the pool's schema), in every transaction.
func Writer(t testing.TB, pool *pgxpool.Pool) *outbox.Writer {
	t.Helper()
	var schema string
	if err := pool.QueryRow(context.Background(), "SELECT current_schema()").Scan(&schema); err != nil {
		t.Fatalf("faultkit: current_schema: %v", err)
	}
	w, err := outbox.NewWriter(outbox.WriterConfig{Channel: schema, Wakeup: outbox.WakeupEveryTx})
	if err != nil {
		t.Fatalf("faultkit: writer: %v", err)
	}
	return w
}

// EventPayload is the JSON payload of the i-th event of a load.
func EventPayload(i int, agg string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"n":%d,"aggregate":%q,"pad":"%s"}`, i, agg, strings.Repeat("x", 32)))
}

// Event is the n-th test event of aggregate agg.
func Event(agg string, n int) outbox.Event {
	return outbox.Event{ID: outbox.NewID(), AggregateID: agg, Type: "fault.test", Payload: EventPayload(n, agg)}
}

// WriteEvents commits n events, spread round-robin over the given number of
// aggregates ("agg-0", "agg-1", ...), in transactions of up to 50 events,
// notifying the relays' channel, and returns them as the checker expects
// them (Seq is the insert order, consistent with the table's seq since one
// writer inserts them one transaction after the other).
func WriteEvents(t testing.TB, pool *pgxpool.Pool, n, aggregates int) []checker.Expected {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := Writer(t, pool)
	out := make([]checker.Expected, 0, n)
	for start := 0; start < n; start += 50 {
		end := min(start+50, n)
		evs := make([]outbox.Event, 0, end-start)
		for i := start; i < end; i++ {
			agg := fmt.Sprintf("agg-%d", i%aggregates)
			evs = append(evs, outbox.Event{ID: outbox.NewID(), AggregateID: agg, Type: "fault.test", Payload: EventPayload(i, agg)})
		}
		if err := Commit(ctx, pool, w, evs); err != nil {
			t.Fatalf("faultkit: write events: %v", err)
		}
		for i, e := range evs {
			out = append(out, checker.Expected{ID: e.ID, AggregateID: e.AggregateID, Payload: e.Payload, Seq: int64(start + i)})
		}
	}
	return out
}

// Commit commits evs in one transaction, bounded by 5 s.
func Commit(ctx context.Context, pool *pgxpool.Pool, w *outbox.Writer, evs []outbox.Event) error {
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

// Insert commits evs in one transaction, failing the test on error.
func Insert(t testing.TB, pool *pgxpool.Pool, w *outbox.Writer, evs ...outbox.Event) {
	t.Helper()
	if err := Commit(context.Background(), pool, w, evs); err != nil {
		t.Fatalf("faultkit: insert events: %v", err)
	}
}

// Load commits events at a steady rate until stopped (see StartLoad).
type Load struct {
	cancel context.CancelFunc
	done   chan struct{}

	// Committed counts events whose transaction committed, Failed the
	// transactions that failed.
	Committed atomic.Int64
	Failed    atomic.Int64

	mu      sync.Mutex
	ids     []uuid.UUID // events whose transaction's Commit returned nil
	lastErr error
}

// StartLoad commits a transaction of perTx events every interval, spread
// round-robin over aggregates "<prefix>-0".."<prefix>-(aggregates-1)",
// until Stop (or the test's end).
func StartLoad(t testing.TB, pool *pgxpool.Pool, w *outbox.Writer, prefix string, aggregates, perTx int, interval time.Duration) *Load {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &Load{cancel: cancel, done: make(chan struct{})}
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
				evs[i] = outbox.Event{ID: outbox.NewID(), AggregateID: agg, Type: "fault.load", Payload: EventPayload(n, agg)}
				n++
			}
			// Not cancelled by Stop: a transaction cancelled while its
			// COMMIT is on the wire may still commit after Stop returned,
			// and its events would then look like phantoms to a checker
			// that read the table meanwhile.
			cctx, cancelTx := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			err := Commit(cctx, pool, w, evs)
			cancelTx()
			if err != nil {
				l.Failed.Add(1)
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
			l.Committed.Add(int64(len(evs)))
		}
	}()
	t.Cleanup(l.Stop)
	return l
}

// Stop stops the load and waits for its last transaction.
func (l *Load) Stop() {
	l.cancel()
	<-l.done
}

// LastErr returns the last writer error.
func (l *Load) LastErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastErr
}

// IDs returns the IDs of the events whose commit succeeded.
func (l *Load) IDs() []uuid.UUID {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]uuid.UUID(nil), l.ids...)
}
