package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/claim"
)

// samplePayment is the JSON payload of a sample event.
type samplePayment struct {
	PaymentID  string    `json:"payment_id"`
	Status     string    `json:"status"`
	Amount     int64     `json:"amount"` // in minor units (cents)
	Currency   string    `json:"currency"`
	Customer   string    `json:"customer"`
	OccurredAt time.Time `json:"occurred_at"`
}

// sampleEvent returns the i-th sample event (from 0): even i authorizes
// payment i/2+1, odd i captures it.
func sampleEvent(i int64, now time.Time) outbox.Event {
	n := i/2 + 1
	p := samplePayment{
		PaymentID:  fmt.Sprintf("pay_%06d", n),
		Status:     "authorized",
		Amount:     500 + (n*7919)%20000,
		Currency:   []string{"EUR", "USD", "GBP"}[n%3],
		Customer:   fmt.Sprintf("cus_%04d", 1+(n*37)%500),
		OccurredAt: now.UTC().Truncate(time.Millisecond),
	}
	if i%2 == 1 {
		p.Status = "captured"
	}
	payload, _ := json.Marshal(p) // plain struct: cannot fail
	return outbox.Event{
		ID:          outbox.NewID(),
		AggregateID: p.PaymentID,
		Type:        "payment." + p.Status,
		Payload:     payload,
		Headers:     map[string]string{"source": "outbox-dev"},
	}
}

// writeSamples writes one sample event per 1/rate seconds, each in its own
// transaction through outbox.Add, until ctx is done, and returns how many
// it committed. Failures are logged and the next tick tries again. A
// write under way when ctx ends is finished, not cancelled: a COMMIT cut
// off after it was sent may have committed, and the count would be wrong.
func writeSamples(ctx context.Context, pool *pgxpool.Pool, rate float64, lat *latencies, log *zap.Logger) int64 {
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	var i, written int64
	for {
		ev := sampleEvent(i, time.Now())
		if err := writeOne(context.WithoutCancel(ctx), pool, ev, lat); err != nil {
			if ctx.Err() != nil {
				return written
			}
			log.Warn("sample event not written; retrying at the next tick", zap.Error(err))
		} else {
			i++
			written++
		}
		select {
		case <-ctx.Done():
			return written
		case <-tick.C:
		}
	}
}

// writeOne commits ev in a transaction of its own, the way an application
// writes its business change and its events together, and tells lat the
// commit time.
func writeOne(ctx context.Context, pool *pgxpool.Pool, ev outbox.Event, lat *latencies) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// ... the application's own INSERT/UPDATE would go here, on tx ...
	if err := outbox.Add(ctx, tx, ev); err != nil {
		return err
	}
	// Registered before COMMIT: the relay may publish the event before
	// Commit returns here.
	lat.pending(ev)
	if err := tx.Commit(ctx); err != nil {
		lat.forget(ev.ID.String())
		return fmt.Errorf("commit: %w", err)
	}
	lat.committed(ev.ID.String(), time.Now())
	return nil
}

// latencies matches the writer's commits with the relay's OnPublished
// calls by event ID and prints one line per event when it has both.
type latencies struct {
	out *lockedWriter
	mu  sync.Mutex
	m   map[string]*inflight
}

type inflight struct {
	typ, agg             string
	commit, publish      time.Time
	hasCommit, published bool
}

func newLatencies(out *lockedWriter) *latencies {
	return &latencies{out: out, m: make(map[string]*inflight)}
}

func (l *latencies) pending(ev outbox.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.m[ev.ID.String()] = &inflight{typ: ev.Type, agg: ev.AggregateID}
}

func (l *latencies) forget(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, id)
}

func (l *latencies) committed(id string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.m[id]
	if f == nil {
		return
	}
	f.commit, f.hasCommit = at, true
	if f.published {
		delete(l.m, id)
		l.print(id, f)
	}
}

// published is the relay's OnPublished hook.
func (l *latencies) published(rows []claim.Row) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, row := range rows {
		f := l.m[row.ID]
		if f == nil {
			// Not written by this process (an earlier run, another writer).
			l.out.printf("published %s %s event_id=%s (not written by this run)\n", row.EventType, row.AggregateID, row.ID)
			continue
		}
		f.publish, f.published = now, true
		if f.hasCommit {
			delete(l.m, row.ID)
			l.print(row.ID, f)
		}
	}
}

func (l *latencies) print(id string, f *inflight) {
	d := f.publish.Sub(f.commit)
	if d < 0 {
		l.out.printf("published %s %s event_id=%s: Kafka's ack came %s before COMMIT returned to the writer\n", f.typ, f.agg, id, fmtDur(-d))
		return
	}
	l.out.printf("published %s %s event_id=%s %s from COMMIT to Kafka's ack\n", f.typ, f.agg, id, fmtDur(d))
}

// fmtDur prints a latency with about three significant digits.
func fmtDur(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	}
	return d.Round(time.Millisecond).String()
}
