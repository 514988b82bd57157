package metrics

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/testenv"
)

func TestRefreshWaitBoundsTheGaugesDutyCycle(t *testing.T) {
	for _, c := range []struct{ interval, took, want time.Duration }{
		{5 * time.Second, 3 * time.Millisecond, 5 * time.Second},
		{5 * time.Second, 250 * time.Millisecond, 5 * time.Second},
		{5 * time.Second, 1400 * time.Millisecond, 28 * time.Second},
		{100 * time.Millisecond, 10 * time.Millisecond, 200 * time.Millisecond},
	} {
		if got := refreshWait(c.interval, c.took); got != c.want {
			t.Errorf("refreshWait(%s, %s) = %s, want %s", c.interval, c.took, got, c.want)
		}
	}
}

// TestEarlyRefreshReadsTheAgesOnly: the refreshes a relay asks for while it
// publishes a backlog (oldest.go) read the oldest rows' ages and not the
// counts, whose scan grows with the backlog (with three relays each
// recounted a 100,000-event burst at every such refresh); the counts keep
// their last values until the next full refresh.
func TestEarlyRefreshReadsTheAgesOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	m, err := New(Config{}, db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(m.agesSQL, "count(") {
		t.Fatalf("the ages-only statement counts rows:\n%s", m.agesSQL)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload, created_at)
SELECT gen_random_uuid(), 'a' || g, 't', '{}', now() - interval '100 seconds' FROM generate_series(1, 3) g`); err != nil {
		t.Fatal(err)
	}
	if s, err := m.Refresh(ctx); err != nil || s.Unpublished != 3 {
		t.Fatalf("full refresh: %+v, %v; want 3 unpublished", s, err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE outbox SET published_at = now();
INSERT INTO outbox (id, aggregate_id, event_type, payload, created_at) VALUES (gen_random_uuid(), 'b', 't', '{}', now() - interval '50 seconds')`); err != nil {
		t.Fatal(err)
	}
	s, err := m.refresh(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if s.OldestUnpublishedAge < 50*time.Second || s.OldestUnpublishedAge > 90*time.Second {
		t.Errorf("early refresh: oldest unpublished age %s, want the 50 s event's", s.OldestUnpublishedAge)
	}
	if s.Unpublished != 3 {
		t.Errorf("early refresh: %d unpublished, want the last count (3) kept", s.Unpublished)
	}
	if s, err := m.Refresh(ctx); err != nil || s.Unpublished != 1 {
		t.Fatalf("full refresh after: %+v, %v; want 1 unpublished", s, err)
	}
}
