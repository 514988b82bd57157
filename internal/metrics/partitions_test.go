package metrics_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/metrics"
	"github.com/pgoutbox/outbox/internal/sqladmin"
	"github.com/pgoutbox/outbox/internal/testenv"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

// On a time-partitioned table, a partition that could not be created
// fails the "partitions" readiness check, naming it and what to do, and
// sets outbox_time_partitions_failing; rows in the DEFAULT partition show
// in outbox_default_partition_rows without failing readiness (they are
// still published). Issue 29: every new row landed in DEFAULT without a
// word but a log line. Once the row is moved into its partition and a
// round succeeds, the check passes and the gauges are 0.
func TestReadinessSaysRowsLandInTheDefaultPartition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.DB(t)
	if _, err := outboxsql.MigrateWith(ctx, db.Pool, outboxsql.MigrateOptions{TimePartitioned: true, TimePartitionInterval: time.Hour, TimePartitionsAhead: 1}); err != nil {
		t.Fatal(err)
	}
	m, err := metrics.New(metrics.Config{ReadyCacheTTL: -1}, db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	state := func() (metrics.Check, float64, float64) {
		t.Helper()
		if _, err := m.CheckTable(ctx); err != nil {
			t.Fatal(err)
		}
		rows, _ := gauge(t, m, "outbox_default_partition_rows", nil)
		failing, _ := gauge(t, m, "outbox_time_partitions_failing", nil)
		return m.Ready(ctx).Checks["partitions"], rows, failing
	}
	if c, rows, failing := state(); !c.OK || rows != 0 || failing != 0 {
		t.Fatalf("an empty table: %+v, %v rows in DEFAULT, failing %v", c, rows, failing)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, created_at) VALUES (gen_random_uuid(), 'a', 't', now() + interval '3 hours')`); err != nil {
		t.Fatal(err)
	}
	c, rows, _ := state()
	if !c.OK || rows != 1 {
		t.Fatalf("a row in DEFAULT: %+v, gauge %v; want the gauge at 1 and the check passing", c, rows)
	}
	m.SetTimePartitions(&sqladmin.PartitionsError{Table: "outbox", Failed: []sqladmin.PartitionFailure{{Name: "outbox_p20261203_2300", Err: errors.New("permission denied")}}})
	c, _, failing := state()
	if c.OK || failing != 1 || !strings.Contains(c.Detail, "outbox_p20261203_2300") || !strings.Contains(c.Detail, "outbox-relay grants") {
		t.Fatalf("a partition not created: %+v, failing %v; want the check naming it and the grants", c, failing)
	}
	var now time.Time
	if err := db.Pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	_, err = sqladmin.CreateTimePartitions(ctx, db.Pool, "outbox", now, now.Add(4*time.Hour))
	m.SetTimePartitions(err)
	if c, rows, failing := state(); !c.OK || rows != 0 || failing != 0 {
		t.Fatalf("after the partitions were created (%v): %+v, %v rows in DEFAULT, failing %v", err, c, rows, failing)
	}
}
