package relay_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/relay"
)

// A COPY into the outbox takes the seqs of its buffered rows before its
// transaction gets an xid. The claim floor once moved past them: when the
// COPY committed, claims starting at the floor published its later rows, and
// an event of the same aggregate inserted afterwards, before its earlier
// rows, which only the 10-second rescan from seq 0 found. (Found by a
// reviewer's break attempt; lease.advance now waits for every transaction
// running when a marker is taken, xid or not.)
func TestRowsCommittedBelowTheFloorKeepTheirAggregateOrder(t *testing.T) {
	t.Parallel()
	db, k := testenv.MigratedDB(t), testenv.Kafka(t)
	topic := k.Topic(t, 1)
	h := startRelay(t, db, k, topic, opts{noNotify: true, relay: relay.Config{PollInterval: 50 * time.Millisecond}})
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db.ConnString)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	const n = 900
	pr, pw := io.Pipe()
	go func() {
		for i := 0; i < n; i++ {
			fmt.Fprintf(pw, "%s\tagg-x\tt\t{\"n\":%d}\n", outbox.NewID(), i)
		}
		// A slow COPY source: once the server has taken the seqs of all n
		// buffered rows (no xid yet), the relay claims a few times (and
		// moves its floor) before the COPY goes on.
		// (Not testenv.Eventually: this is not the test's goroutine.)
		waitFor := func(cond func() bool) bool {
			for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					return false
				}
			}
			return true
		}
		if !waitFor(func() bool {
			var last *int64
			_ = db.Pool.QueryRow(ctx, "SELECT pg_sequence_last_value(pg_get_serial_sequence('outbox', 'seq'))").Scan(&last)
			return last != nil && *last >= n
		}) {
			pw.CloseWithError(errors.New("the COPY did not take its seqs within 10s"))
			return
		}
		claims := h.relay.Stats().Claims
		if !waitFor(func() bool { return h.relay.Stats().Claims >= claims+10 }) {
			pw.CloseWithError(errors.New("the relay did not claim within 10s"))
			return
		}
		pw.Close()
	}()
	if _, err := conn.PgConn().CopyFrom(ctx, pr, "COPY outbox (id, aggregate_id, event_type, payload) FROM STDIN"); err != nil {
		t.Fatal(err)
	}
	// The next event of the same aggregate, committed after the COPY.
	if err := outbox.Add(ctx, db.Pool, outbox.Event{ID: outbox.NewID(), AggregateID: "agg-x", Type: "t", Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))}); err != nil {
		t.Fatal(err)
	}
	recs := k.Consume(t, topic, n+1, 30*time.Second)
	t.Logf("relay stats %+v", h.relay.Stats())
	last := -1
	inversions := 0
	var first []int
	for _, r := range recs {
		var p struct{ N int }
		if err := json.Unmarshal(r.Value, &p); err != nil {
			t.Fatal(err)
		}
		if len(first) < 5 {
			first = append(first, p.N)
		}
		if p.N < last {
			if inversions == 0 {
				t.Errorf("agg-x: event n=%d (lower seq) published after n=%d", p.N, last)
			}
			inversions++
		}
		last = p.N
	}
	t.Logf("%d records; first published n=%v", len(recs), first)
	if inversions > 0 {
		t.Fatalf("%d order inversions within one aggregate", inversions)
	}
}
