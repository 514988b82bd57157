package claim_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/lease"
)

// hook runs fn once, just before the first statement containing marker is
// sent on the pool it traces.
type hook struct {
	marker string
	armed  atomic.Bool
	fn     func()
}

func (h *hook) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, h.marker) && h.armed.CompareAndSwap(true, false) {
		h.fn()
	}
	return ctx
}
func (h *hook) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart does the same for a statement sent in a batch (a static
// member's move is one, after its member lock).
func (h *hook) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	for _, q := range d.Batch.QueuedQueries {
		if strings.Contains(q.SQL, h.marker) && h.armed.CompareAndSwap(true, false) {
			h.fn()
		}
	}
	return ctx
}
func (h *hook) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (h *hook) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// A relay's move sets its generation to the one the move bumped to only
// when nothing else changed ownership since the rebalance read the owners:
// here relay b gives back partitions assigned to a between a's owners read
// and a's move. Had a taken the move's generation (which counts b's change
// too) it would not see that those partitions are free, and their events
// would wait until a's next renewal (Lease/6, 100 s here); a's next claims
// must find the generation moved, rebalance and take them.
func TestOwnMoveDoesNotHideAConcurrentGiveBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	h := &hook{marker: "acquired AS"} // a's move statement (Move)
	cfg, err := pgxpool.ParseConfig(db.ConnString)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = h
	apool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer apool.Close()
	// Long enough that no relay renews (and so rebalances) on its own
	// during the test however slow the machine: only the steps below move
	// partitions.
	const leaseFor = 10 * time.Minute
	b := newClaimer(t, db.Pool, lease.Config{RelayID: "b", BatchSize: 100, Lease: leaseFor})
	c := newClaimer(t, db.Pool, lease.Config{RelayID: "c", BatchSize: 100, Lease: leaseFor})
	claim := func(x *claim.Claimer) *claim.Batch {
		t.Helper()
		bt, err := x.Claim(ctx)
		if err != nil {
			t.Fatal(err)
		}
		x.Settled(bt.Token, time.Time{})
		return bt
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		claim(b)
		claim(c)
		return c.Ownership().Owned == 128 && b.Ownership().Owned == 128
	}, "b and c did not settle on 128 partitions each")
	claim(b) // one more claim each, once settled (their generations current)
	claim(c)
	// c dies: its membership ends (it leases nothing).
	if _, err := db.Pool.Exec(ctx, "UPDATE outbox_relays SET until = now() - interval '1 second' WHERE member = $1", c.Member()); err != nil {
		t.Fatal(err)
	}
	// a joins and reads the owners (b's half, dead c's half); just before
	// its move takes its share of c's, b rebalances and gives back its
	// partitions that are now assigned to a.
	a := newClaimer(t, apool, lease.Config{RelayID: "a", BatchSize: 100, Lease: leaseFor})
	h.fn = func() { claim(b) }
	h.armed.Store(true)
	claim(a)
	if h.armed.Load() {
		t.Fatal("a's move did not run")
	}
	var free []int
	rows, err := db.Pool.Query(ctx, "SELECT partition FROM outbox_partitions WHERE owner IS NULL ORDER BY partition")
	if err != nil {
		t.Fatal(err)
	}
	free, err = pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	if len(free) == 0 {
		t.Skip("b gave nothing back between a's owners read and its move")
	}
	var agg string
	for i := 0; agg == ""; i++ {
		if s := fmt.Sprintf("k%d", i); outbox.KeyPartition(s, 256) == free[0] {
			agg = s
		}
	}
	if err := outbox.Add(ctx, db.Pool, outbox.Event{AggregateID: agg, Type: "t", Payload: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	// A few claims of each relay, well within a's renewal (100 s).
	began := time.Now()
	for i := 0; i < 10; i++ {
		if len(claim(a).Rows)+len(claim(b).Rows) > 0 {
			t.Logf("the event in a partition b gave back was claimed after %d rounds, %s", i+1, time.Since(began).Round(time.Millisecond))
			return
		}
	}
	t.Fatalf("%d partitions b gave back (e.g. %d) stay unowned after 10 claims of each relay (%s): a owns %d",
		len(free), free[0], time.Since(began).Round(time.Millisecond), a.Ownership().Owned)
}
