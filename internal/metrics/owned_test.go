package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/leasetest"
	"github.com/pgoutbox/outbox/internal/metrics"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/lease"
	"github.com/pgoutbox/outbox/relay"
)

// outbox_relay_oldest_claimable_age_seconds is the oldest claimable event
// of the key partitions the attached relay owns: with two relays owning
// their shares (real claimers, settled), an event 100 s old in one's
// partitions and one 10 s old in the other's, each relay's gauge shows
// its own.
func TestOwnedOldestClaimableAge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	var claimers []*claim.Claimer
	for range 2 {
		c, err := claim.New(db.Pool, lease.Config{BatchSize: 1})
		if err != nil {
			t.Fatal(err)
		}
		claimers = append(claimers, c)
	}
	aggs := leasetest.Aggregates(leasetest.Settle(t, db.Pool, "outbox", claimers...), 1)
	agg := map[string]string{}
	for m, a := range aggs {
		agg[m] = a[0]
	}
	// The 100 s event first: it has the lower seq, so it is also the
	// table's lowest-seq claimable event.
	ages := map[string]time.Duration{claimers[0].Member(): 100 * time.Second, claimers[1].Member(): 10 * time.Second}
	for _, member := range []string{claimers[0].Member(), claimers[1].Member()} {
		age := ages[member]
		if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload, created_at)
VALUES (gen_random_uuid(), $1, 't', '{}', now() - $2 * interval '1 second')`, agg[member], age.Seconds()); err != nil {
			t.Fatal(err)
		}
	}
	for member, age := range ages {
		m, err := metrics.New(metrics.Config{}, db.Pool, nil)
		if err != nil {
			t.Fatal(err)
		}
		m.Attach(metrics.Components{Relay: &fakeRelay{s: relay.Stats{Member: member}}})
		s, err := m.Refresh(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.OwnedOldestClaimableAge; got < age || got > age+5*time.Second {
			t.Errorf("%s: owned oldest claimable age %s, want about %s", member, got, age)
		}
		if s.OldestClaimableAge < 100*time.Second {
			t.Errorf("table-wide oldest claimable age %s, want the 100 s event's", s.OldestClaimableAge)
		}
	}
}
