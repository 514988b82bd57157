package metrics_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/metrics"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/kafka"
	"github.com/pgoutbox/outbox/relay"
)

// After an outage, once the relay has published the backlog, the scraped
// outbox_oldest_unpublished_age_seconds dropped only at the next refresh
// (issue 20: 7.85 s, one second after the last event arrived). The relay
// tells Metrics what it published (relay.Observer): the age drops as soon
// as it publishes the oldest rows, for a backlog the last refresh saw
// whole and for one larger than what a refresh keeps of it. Here the next
// periodic refresh is an hour away.
func TestAgeDropsWhenTheRelayPublishesTheOldest(t *testing.T) {
	t.Parallel()
	for _, n := range []int{20, 500} {
		t.Run(fmt.Sprintf("%d events", n), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := testenv.MigratedDB(t)
			k := testenv.Kafka(t)
			if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload, created_at)
SELECT gen_random_uuid(), 'a' || (i % 7), 't', '{}', now() - interval '30 seconds' FROM generate_series(1, $1) i`, n); err != nil {
				t.Fatal(err)
			}
			m, err := metrics.New(metrics.Config{Interval: time.Hour}, db.Pool, testenv.Logger(t))
			if err != nil {
				t.Fatal(err)
			}
			refresher(t, m)
			age := func(name string) float64 {
				v, _ := gauge(t, m, name, nil)
				return v
			}
			testenv.Eventually(t, 10*time.Second, func() bool { return age("outbox_oldest_unpublished_age_seconds") >= 30 },
				"the first refresh did not see the 30 s old backlog")
			if a := age("outbox_oldest_claimable_age_seconds"); a < 30 {
				t.Fatalf("oldest claimable age %v, want >= 30", a)
			}
			svc, err := relay.NewService(db.Pool, relay.ServiceConfig{
				Relay: relay.Config{Topic: k.Topic(t, 2), Observer: m}, Kafka: kafka.Config{Brokers: k.Brokers}, NoNotify: true,
			}, testenv.Logger(t))
			if err != nil {
				t.Fatal(err)
			}
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- svc.Run(rctx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Error(err)
				}
			}()
			testenv.Eventually(t, 30*time.Second, func() bool { return unpublishedRows(t, db) == 0 }, "the relay did not publish the backlog")
			testenv.Eventually(t, 5*time.Second, func() bool {
				return age("outbox_oldest_unpublished_age_seconds") < 5 && age("outbox_oldest_claimable_age_seconds") < 5
			}, "after the relay published every event the ages did not drop below 5s (the next periodic refresh is an hour away)")
		})
	}
}

func unpublishedRows(t *testing.T, db *testenv.TestDB) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox WHERE published_at IS NULL").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
