package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/sqladmin"
	"github.com/pgoutbox/outbox/internal/testenv"
)

// checkOrder returns an error unless every key's records carry payload
// numbers ("n") that grow, repeats of a number seen before (at-least-once
// redelivery) aside, and every number of want appears.
func checkOrder(recs []testenv.Record, want int) error {
	last := map[string]int{}
	seen := map[int]bool{}
	for _, r := range recs {
		var p struct{ N int }
		if err := json.Unmarshal(r.Value, &p); err != nil {
			return fmt.Errorf("record %s: %v", r.Value, err)
		}
		if seen[p.N] {
			continue
		}
		seen[p.N] = true
		if k := string(r.Key); p.N <= last[k] {
			return fmt.Errorf("aggregate %s: event %d after %d", k, p.N, last[k])
		} else {
			last[k] = p.N
		}
	}
	if len(seen) != want {
		return fmt.Errorf("%d distinct events delivered, want %d", len(seen), want)
	}
	return nil
}

// unpublished counts the table's unpublished rows.
func unpublished(t *testing.T, db *testenv.TestDB, table string) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM `+table+` WHERE published_at IS NULL`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A table made by migrate --time-partitioned drains with 1 and with 3
// relays: 3,000 events over 100 aggregates, written in an order that
// interleaves 7 daily partitions (5 days back to tomorrow) and the
// DEFAULT partition, all reach Kafka in per-aggregate order and end
// published; the relays create the partition ahead that went missing.
func TestTimePartitionedTableDrains(t *testing.T) {
	t.Parallel()
	k := testenv.Kafka(t)
	for _, relays := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d relays", relays), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := testenv.DB(t)
			if code, out, stderr := runMain(t, ctx, "migrate", "--database-url", db.ConnString, "--time-partitioned", "--time-partitions-ahead", "2"); code != 0 {
				t.Fatalf("migrate: %d %s %s", code, out, stderr)
			}
			var now time.Time
			if err := db.Pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
				t.Fatal(err)
			}
			if _, err := sqladmin.CreateTimePartitions(ctx, db.Pool, "outbox", now.Add(-5*24*time.Hour), now); err != nil {
				t.Fatal(err)
			}
			ahead := sqladmin.TimePartitionName("outbox", now.UTC().Truncate(24*time.Hour).Add(2*24*time.Hour))
			if _, err := db.Pool.Exec(ctx, `DROP TABLE `+ahead); err != nil {
				t.Fatal(err)
			}
			const n = 3000
			if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload, created_at)
SELECT gen_random_uuid(), 'agg-' || (g % 100), 't', jsonb_build_object('n', g),
  CASE WHEN g % 50 = 0 THEN now() - interval '30 days' ELSE now() + (((g * 7919) % 7) - 5) * interval '1 day' END
FROM generate_series(1, $1) g`, n); err != nil {
				t.Fatal(err)
			}
			var parts int
			if err := db.Pool.QueryRow(ctx, `SELECT count(DISTINCT tableoid) FROM outbox`).Scan(&parts); err != nil || parts != 8 {
				t.Fatalf("events in %d partitions (%v), want 8", parts, err)
			}
			topic := k.Topic(t, 4)
			var stops []func() int
			var errs []*testenv.SyncBuffer
			for i := 0; i < relays; i++ {
				stderr, stop := runInBackground(t, "run", "--database-url", db.ConnString, "--brokers", k.Brokers[0], "--topic", topic,
					"--channel", db.Schema, "--metrics-addr", "", "--poll-interval", "100ms", "--startup-wait", "30s",
					"--relay-id", fmt.Sprintf("relay-%d", i), "--log-level", "warn")
				stops, errs = append(stops, stop), append(errs, stderr)
			}
			testenv.Eventually(t, 90*time.Second, func() bool { return unpublished(t, db, "outbox") == 0 }, "events left unpublished")
			testenv.Eventually(t, 30*time.Second, func() bool {
				var ok bool
				_ = db.Pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, ahead).Scan(&ok)
				return ok
			}, "the relays did not create partition %s", ahead)
			recs := k.Consume(t, topic, n, 60*time.Second)
			for i, stop := range stops {
				if code := stop(); code != 0 {
					t.Errorf("relay %d exit %d: %s", i, code, errs[i].String())
				}
			}
			if err := checkOrder(recs, n); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// adopt on a Debezium outbox table partitioned by RANGE (created_at):
// the storage parameters go to its partitions (the table itself refuses
// them), seq to a sequence of its own (PostgreSQL 15 cannot add an
// identity column to a partitioned table), and the backlog of both
// partitions and the producers' new rows are relayed in per-aggregate
// order; status and inspect work on it.
func TestAdoptRangePartitionedDebeziumTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.DB(t)
	k := testenv.Kafka(t)
	// An aggregate type, so a topic, of this test's own: Debezium routing
	// names the topic after it, and other tests on the broker route Order.
	typ := "PartitionedOrder_" + db.Schema
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE outboxevent (
  id uuid NOT NULL,
  aggregatetype varchar(255) NOT NULL,
  aggregateid varchar(255) NOT NULL,
  type varchar(255) NOT NULL,
  payload jsonb,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (id, created_at)
) PARTITION BY RANGE (created_at);
CREATE TABLE outboxevent_old PARTITION OF outboxevent FOR VALUES FROM (now() - interval '20 days') TO (now() - interval '1 day');
CREATE TABLE outboxevent_new PARTITION OF outboxevent FOR VALUES FROM (now() - interval '1 day') TO (now() + interval '20 days')`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outboxevent (id, aggregatetype, aggregateid, type, payload, created_at)
SELECT gen_random_uuid(), $1, 'order-' || (g % 10), 'OrderCreated', jsonb_build_object('n', g),
  now() - CASE WHEN g % 2 = 0 THEN interval '10 days' ELSE interval '1 minute' END
FROM generate_series(1, 200) g`, typ); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if code, out, stderr := runMain(t, ctx, "adopt", "--database-url", db.ConnString, "--table", "outboxevent", "--debezium"); code != 0 || !strings.Contains(out, "ready") {
			t.Fatalf("adopt: %d %q %q", code, out, stderr)
		}
	}
	var opts string
	if err := db.Pool.QueryRow(ctx, `SELECT array_to_string(reloptions, ',') FROM pg_class WHERE relname = 'outboxevent_old' AND relnamespace = $1::regnamespace`, db.Schema).Scan(&opts); err != nil || !strings.Contains(opts, "fillfactor=40") {
		t.Fatalf("partition options %q (%v), want fillfactor=40 and the rest", opts, err)
	}
	// The producers' own INSERTs, unchanged, after the backlog.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outboxevent (id, aggregatetype, aggregateid, type, payload)
SELECT gen_random_uuid(), $1, 'order-' || (g % 10), 'OrderUpdated', jsonb_build_object('n', g) FROM generate_series(201, 300) g`, typ); err != nil {
		t.Fatal(err)
	}
	stderr, stop := runInBackground(t, "run", "--database-url", db.ConnString, "--brokers", k.Brokers[0],
		"--table", "outboxevent", "--debezium", "--topic", "unrouted", "--kafka-auto-create-topics", "--channel", db.Schema,
		"--metrics-addr", "", "--poll-interval", "100ms", "--startup-wait", "30s", "--log-level", "warn")
	testenv.Eventually(t, 60*time.Second, func() bool { return unpublished(t, db, "outboxevent") == 0 }, "events left unpublished")
	if code := stop(); code != 0 {
		t.Fatalf("run exit %d: %s", code, stderr.String())
	}
	recs := k.Consume(t, "outbox.event."+typ, 300, 30*time.Second)
	if err := checkOrder(recs, 300); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runMain(t, ctx, "status", "--database-url", db.ConnString, "--table", "outboxevent", "--debezium")
	if code != 0 || !strings.Contains(out, "time partitions: 2") || !strings.Contains(out, "published (kept)  300") {
		t.Fatalf("status: %d\n%s\n%s", code, out, errOut)
	}
	var id string
	if err := db.Pool.QueryRow(ctx, `SELECT id::text FROM outboxevent_old LIMIT 1`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runMain(t, ctx, "inspect", "--database-url", db.ConnString, "--table", "outboxevent", "--debezium", "--event-id", id); code != 0 || !strings.Contains(out, id) {
		t.Fatalf("inspect: %d\n%s\n%s", code, out, errOut)
	}
}
