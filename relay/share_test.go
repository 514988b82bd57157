package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/lease"
)

// Three relays on one table with a backlog of 30,000 events over 100 hot
// aggregates (before key partitions, such a backlog drained 40 times
// slower with three relays than with one: every claim stepped over the
// rows the others held, behind one lock): the relays split the key
// partitions (each owns a third, within one), each publishes a share of
// the backlog, every event is published once and every aggregate's
// events arrive in order.
func TestRelaysShareTheKeyPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, k := testenv.MigratedDB(t), testenv.Kafka(t)
	topic := k.Topic(t, 6)
	const n, aggregates = 30000, 100
	var hs []*harness
	for i := range 3 {
		hs = append(hs, startRelay(t, db, k, topic, opts{lease: lease.Config{RelayID: fmt.Sprint("r", i)}}))
	}
	// The backlog comes in one transaction once all three have joined:
	// inserted before, it could be drained by the first relay before a
	// slow start of the third, which would then publish nothing.
	testenv.Eventually(t, time.Minute, func() bool {
		for _, h := range hs {
			if h.claimer.Ownership().Members != 3 {
				return false
			}
		}
		return true
	}, "the three relays did not all join")
	if _, err := db.Pool.Exec(ctx, fmt.Sprintf(`INSERT INTO outbox (id, aggregate_id, event_type, payload)
SELECT gen_random_uuid(), 'agg-' || (i %% %d), 'backlog', jsonb_build_object('n', i) FROM generate_series(1, %d) i`, aggregates, n)); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	testenv.Eventually(t, 2*time.Minute, func() bool { return unpublished(t, db) == 0 }, "the backlog was not drained")
	drained := time.Since(began)
	var shares []int64
	for _, h := range hs {
		st, own := h.relay.Stats(), h.claimer.Ownership()
		shares = append(shares, st.Published)
		if st.Published == 0 {
			t.Errorf("%s published nothing (ownership %+v)", own.Member, own)
		}
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		for _, h := range hs {
			if o := h.claimer.Ownership(); o.Members != 3 || o.Owned < o.Partitions/3 || o.Owned > (o.Partitions+2)/3 || o.Releasing > 0 {
				return false
			}
		}
		return true
	}, "the key partitions were not split in three: %+v, %+v, %+v", hs[0].claimer.Ownership(), hs[1].claimer.Ownership(), hs[2].claimer.Ownership())
	t.Logf("3 relays drained %d events over %d aggregates in %s (%.0f events/s), published %v", n, aggregates, drained.Round(time.Millisecond), n/drained.Seconds(), shares)

	// Order: the table's seq per aggregate against the topic.
	rows, err := db.Pool.Query(ctx, "SELECT id::text, aggregate_id FROM outbox ORDER BY seq")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{}
	for rows.Next() {
		var id, agg string
		if err := rows.Scan(&id, &agg); err != nil {
			t.Fatal(err)
		}
		want[agg] = append(want[agg], id)
	}
	rows.Close()
	recs := k.Consume(t, topic, n, time.Minute)
	got, dups := firstAppearances(recs)
	if len(recs)-dups != n {
		t.Fatalf("%d distinct events on the topic, want %d", len(recs)-dups, n)
	}
	for agg, ids := range want {
		if fmt.Sprint(got[agg]) != fmt.Sprint(ids) {
			t.Fatalf("aggregate %s out of order", agg)
		}
	}
}
