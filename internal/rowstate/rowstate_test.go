package rowstate_test

import (
	"context"
	"testing"

	"github.com/pgoutbox/outbox/internal/rowstate"
	"github.com/pgoutbox/outbox/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Each row is in the state its name says, and State (status, inspect) and
// Claimable (the gauges, readiness) agree on every row: an event behind
// an earlier one a relay leased is claimable (the aggregate's owner claims
// it next), one behind an event backing off or held as a dead letter is
// held.
func TestStatesAndClaimableAgree(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	if _, err := db.Pool.Exec(ctx, `
INSERT INTO outbox (id, aggregate_id, event_type, payload, locked_until, locked_by) VALUES
  (gen_random_uuid(), 'leased', 't', '{"want":"leased"}', now() + interval '1 minute', 'relay-1');
INSERT INTO outbox (id, aggregate_id, event_type, payload) VALUES
  (gen_random_uuid(), 'leased', 't', '{"want":"claimable"}');
INSERT INTO outbox (id, aggregate_id, event_type, payload, locked_until, attempts) VALUES
  (gen_random_uuid(), 'backoff', 't', '{"want":"backing_off"}', now() + interval '1 minute', 1);
INSERT INTO outbox (id, aggregate_id, event_type, payload) VALUES
  (gen_random_uuid(), 'backoff', 't', '{"want":"held"}');
INSERT INTO outbox (id, aggregate_id, event_type, payload, locked_until, dead_lettered_at) VALUES
  (gen_random_uuid(), 'dead', 't', '{"want":"dead_lettered"}', 'infinity', now());
INSERT INTO outbox (id, aggregate_id, event_type, payload) VALUES
  (gen_random_uuid(), 'dead', 't', '{"want":"held"}');
INSERT INTO outbox (id, aggregate_id, event_type, payload, published_at) VALUES
  (gen_random_uuid(), 'done', 't', '{"want":"published"}', now());
INSERT INTO outbox (id, aggregate_id, event_type, payload) VALUES
  (gen_random_uuid(), 'done', 't', '{"want":"claimable"}');`); err != nil {
		t.Fatal(err)
	}
	st := rowstate.NewStates("outbox", "")
	rows, err := db.Pool.Query(ctx, `SELECT o.seq, o.payload->>'want', `+st.State("o")+`, `+st.Claimable("o")+` FROM outbox o ORDER BY o.seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var seq int64
		var want, state string
		var claimable bool
		if err := rows.Scan(&seq, &want, &state, &claimable); err != nil {
			t.Fatal(err)
		}
		n++
		if state != want {
			t.Errorf("seq %d: state %q, want %q", seq, state, want)
		}
		if (state == rowstate.StateClaimable) != claimable {
			t.Errorf("seq %d: State says %q, Claimable says %v", seq, state, claimable)
		}
	}
	if err := rows.Err(); err != nil || n != 8 {
		t.Fatalf("%d rows, %v", n, err)
	}
}
