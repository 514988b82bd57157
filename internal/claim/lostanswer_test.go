package claim_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/lease"
)

// dropConn discards what the server sends while drop is set: the server
// runs and commits what it was sent, and the client never hears the answer
// (a connection lost after the commit, or a deadline that passed while the
// answer was on its way).
type dropConn struct {
	net.Conn
	drop *atomic.Bool
}

func (c dropConn) Read(p []byte) (int, error) {
	for {
		n, err := c.Conn.Read(p)
		if err != nil || !c.drop.Load() {
			return n, err
		}
	}
}

// A claim that committed on the server but failed on the client left its
// rows leased under the relay's own holder, and the relay's own leases do
// not block its claims: the next claim took the aggregate's later event,
// which was then published first (found by a break test: event 2 of an
// aggregate reached Kafka before event 1). After a failed claim the
// Claimer takes a new holder, and the rows of the lost claim block their
// aggregate like another relay's lease.
func TestClaimAfterALostAnswerKeepsOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	var drop atomic.Bool
	// One round trip per claim (exec mode: no prepare), so that the
	// server has committed by the time the client waits for the answer.
	cfg, err := pgxpool.ParseConfig(db.ConnString + "&default_query_exec_mode=exec")
	if err != nil {
		t.Fatal(err)
	}
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return dropConn{Conn: c, drop: &drop}, nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	// The lost claim's lease must outlast the test's slow steps: once it
	// ended, the next claim could rightly take event 1 and event 2.
	c := newClaimer(t, pool, lease.Config{RelayID: "r", Lease: 10 * time.Minute})
	// A first claim registers the relay and warms the connection up.
	if _, err := c.Claim(ctx); err != nil {
		t.Fatal(err)
	}
	first := addEvents(t, db.Pool, "x")[0]
	holder := c.Holder()

	drop.Store(true)
	// The claim's ctx ends once the server has committed it (its row is
	// leased under the holder), not after a fixed time that a slow server
	// may not commit within.
	cctx, cancel := context.WithCancel(ctx)
	committed := make(chan struct{})
	go func() {
		defer close(committed)
		defer cancel()
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline) && cctx.Err() == nil; time.Sleep(10 * time.Millisecond) {
			var lockedBy string
			if err := db.Pool.QueryRow(ctx, "SELECT coalesce(locked_by, '') FROM outbox WHERE id = $1", first).Scan(&lockedBy); err == nil && lockedBy == holder {
				return
			}
		}
	}()
	_, err = c.Claim(cctx)
	cancel()
	<-committed
	drop.Store(false)
	if err == nil {
		t.Fatal("the claim whose answer was dropped succeeded")
	}
	var lockedBy string
	if err := db.Pool.QueryRow(ctx, "SELECT coalesce(locked_by, '') FROM outbox WHERE id = $1", first).Scan(&lockedBy); err != nil {
		t.Fatal(err)
	}
	if lockedBy != holder {
		t.Skipf("the lost claim did not commit (locked_by %q): nothing to check", lockedBy)
	}
	if c.Holder() == holder {
		t.Errorf("holder still %q after a failed claim", holder)
	}

	second := addEvents(t, db.Pool, "x")[0]
	b, err := c.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids(b) {
		if id == second {
			t.Fatalf("the next claim took event 2 of aggregate x while event 1 is leased by the lost claim: claimed %v", ids(b))
		}
	}
}

// A created_at the relay cannot publish (±infinity, which plain SQL can
// write) made every claim of its row fail after it committed ("cannot scan
// Infinity into *time.Time"), once per lease, forever, with the rows
// claimed with it. The claim now returns the row with DecodeErr set, and
// its batch.
func TestClaimReturnsARowWithAnInfiniteCreatedAtAsUndecodable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	addEvents(t, db.Pool, "x")
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload, created_at)
VALUES (gen_random_uuid(), 'bad', 't', '{}', 'infinity')`); err != nil {
		t.Fatal(err)
	}
	addEvents(t, db.Pool, "x")
	c := newClaimer(t, db.Pool, lease.Config{})
	b, err := c.Claim(ctx)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if len(b.Rows) != 3 || b.Rows[0].DecodeErr != nil || b.Rows[2].DecodeErr != nil || b.Rows[1].DecodeErr == nil {
		t.Fatalf("rows %+v: want 3, the middle one undecodable", b.Rows)
	}
	t.Logf("DecodeErr: %v", b.Rows[1].DecodeErr)
}
