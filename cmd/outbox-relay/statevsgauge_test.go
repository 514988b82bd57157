package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/metrics"
	"github.com/pgoutbox/outbox/internal/testenv"
)

// The gauges (and readiness with --ready-max-age), status and inspect
// agree about an event 4 minutes old behind an earlier event a relay
// leased: it is claimable (the aggregate's owner claims it next), the
// oldest claimable event, and readiness fails on its age. (Found by a
// break test: the gauges had changed meaning and status had not.)
func TestStatusAndClaimableGaugeAgree(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	if _, err := db.Pool.Exec(ctx, `
INSERT INTO outbox (id, aggregate_id, event_type, payload, created_at, locked_until, locked_by)
VALUES (gen_random_uuid(), 'a', 't', '{}', now() - interval '5 minutes', now() + interval '1 minute', 'relay-1');
INSERT INTO outbox (id, aggregate_id, event_type, payload, created_at)
VALUES ('6f1c1f5e-0000-4000-8000-000000000001', 'a', 't', '{}', now() - interval '4 minutes');`); err != nil {
		t.Fatal(err)
	}
	m, err := metrics.New(metrics.Config{ReadyMaxAge: time.Minute}, db.Pool, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.Refresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ready := m.Ready(ctx)
	code, out, stderr := runMain(t, ctx, "status", "--database-url", db.ConnString, "--json")
	var st struct {
		Unpublished struct{ Claimable, Held int64 } `json:"unpublished"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
		t.Fatalf("status: %d %q %q", code, out, stderr)
	}
	_, iout, _ := runMain(t, ctx, "inspect", "--database-url", db.ConnString, "--event-id", "6f1c1f5e-0000-4000-8000-000000000001", "--json")
	var ev struct{ State string }
	_ = json.Unmarshal([]byte(iout), &ev)
	t.Logf("gauge: oldest claimable %s; readiness backlog check %+v; status: %d claimable, %d held; inspect: %s",
		s.OldestClaimableAge.Round(time.Second), ready.Checks["backlog"], st.Unpublished.Claimable, st.Unpublished.Held, ev.State)
	if (s.OldestClaimableAge > 0) != (st.Unpublished.Claimable > 0) {
		t.Errorf("the gauge says the oldest claimable event is %s old; status says %d claimable (%d held), inspect says %q",
			s.OldestClaimableAge.Round(time.Second), st.Unpublished.Claimable, st.Unpublished.Held, ev.State)
	}
}
