package metrics_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/listen"
	"github.com/pgoutbox/outbox/internal/metrics"
	"github.com/pgoutbox/outbox/internal/testenv"
)

// TestReadinessNamesAStandby: a relay whose pool reaches a hot standby (a
// replica, or a demoted primary after a failover) cannot claim: the
// database check fails naming the standby, and passes once it is promoted.
func TestReadinessNamesAStandby(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	primary := testenv.Cluster(t)
	standby := testenv.Replica(t, primary)
	pool, err := pgxpool.New(ctx, standby.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	m, err := metrics.New(metrics.Config{ReadyCacheTTL: -1}, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := m.Ready(ctx)
	c := r.Checks["database"]
	want := "connected to a standby (in recovery) at 127.0.0.1:" + strconv.Itoa(standby.Port())
	if c.OK || !strings.HasPrefix(c.Detail, want) || r.Ready {
		t.Fatalf("database check on a standby: %+v; want it failing with %q", c, want)
	}
	t.Logf("on the standby: database: %s", c.Detail)
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if c := m.Ready(ctx).Checks["database"]; !c.OK || c.Detail != "ok" {
		t.Fatalf("database check after the promotion: %+v", c)
	}
}

type reasonListener struct {
	fakeListener
	reason string
}

func (r *reasonListener) Reason() string { return r.reason }

// TestReadinessListenerCheckGivesTheReason: a deaf listener (behind a
// transaction pooler) fails the listener check with its reason.
func TestReadinessListenerCheckGivesTheReason(t *testing.T) {
	t.Parallel()
	m, err := metrics.New(metrics.Config{ReadyCacheTTL: -1}, testenv.DB(t).Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	l := &reasonListener{reason: "LISTEN is not receiving notifications: --database-url goes through a transaction pooler?"}
	l.state.Store(int32(listen.StateDeaf))
	m.Attach(metrics.Components{Relay: &fakeRelay{}, Broker: pingFunc(func(context.Context) error { return nil }), Listener: l})
	r := m.Ready(context.Background())
	want := "listener is deaf: " + l.reason
	if c := r.Checks["listener"]; c.OK || c.Detail != want {
		t.Fatalf("listener check %+v, want failing with %q", c, want)
	}
}
