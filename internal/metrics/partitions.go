package metrics

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgoutbox/outbox/internal/sqladmin"
)

// The time partitions of a time-partitioned table (outbox-relay migrate
// --time-partitioned), as the "partitions" readiness check and two gauges
// report them: the rows in the DEFAULT partition, counted by the table
// check (every Config.Interval), and the last round of the relay's
// partition keeper (SetTimePartitions, every 10 minutes).

// timePartitions is what SetTimePartitions was told last.
type timePartitions struct {
	// failed is the last round's error; nil when it created every
	// partition it was to create.
	failed atomic.Pointer[error]
}

// SetTimePartitions records the outcome of a round of creating the
// table's coming time partitions (sqladmin.EnsureTimePartitions): nil,
// or the error naming the partitions not created. While it is not nil,
// the "partitions" readiness check fails and outbox_time_partitions_failing
// is 1. Safe for concurrent use.
func (m *Metrics) SetTimePartitions(err error) {
	if err == nil {
		m.tparts.failed.Store(nil)
		return
	}
	m.tparts.failed.Store(&err)
}

// partitionsProblem returns the "partitions" readiness check's error: nil
// while every time partition was created (always on a plain table). Rows
// in the DEFAULT partition do not fail it: they are still published, and
// rows older than every partition stay there until retention deletes
// them; outbox_default_partition_rows and an alert report them.
func (m *Metrics) partitionsProblem() error {
	if p := m.tparts.failed.Load(); p != nil {
		var pe *sqladmin.PartitionsError
		what := "the coming time partitions"
		if errors.As(*p, &pe) {
			what = fmt.Sprintf("time partitions %v", pe.Names())
		}
		return fmt.Errorf("table %s: %s could not be created: %v; new rows of their ranges land in the DEFAULT partition meanwhile. The relays retry every 10m: grant what is missing (outbox-relay grants --role ... --table %s prints it), or end the long transaction that holds the table's lock", m.cfg.Table, what, *p, m.cfg.Table)
	}
	return nil
}

// partitionGauges are outbox_default_partition_rows and
// outbox_time_partitions_failing.
func (m *Metrics) partitionGauges() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "outbox_default_partition_rows",
			Help: "Rows in the DEFAULT partition of a time-partitioned outbox table (no time partition covers their created_at; --retention-drop-partitions cannot drop them), at the last table check (every --metrics-interval), counted up to 100000; 0 on a plain table.",
		}, func() float64 { return float64(m.tcheck.defaultRows.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "outbox_time_partitions_failing",
			Help: "1 while the relay's last round of creating the coming time partitions (at start, then every 10m) could not create one of them, else 0; its log and /readyz name them.",
		}, func() float64 {
			if m.tparts.failed.Load() != nil {
				return 1
			}
			return 0
		}),
	}
}
