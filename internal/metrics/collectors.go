package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgoutbox/outbox/internal/listen"
	"github.com/pgoutbox/outbox/internal/retention"
)

// ListenerState exports l's state as outbox_listener_state{state}: 1 for
// the current state, 0 for the others. outbox-relay registers it when it
// runs a listener.
func ListenerState(l *listen.Listener) prometheus.Collector { return listenerState{l} }

type listenerState struct{ l *listen.Listener }

var descListenerState = prometheus.NewDesc("outbox_listener_state",
	"The LISTEN connection's state: 1 for the current one (connecting, listening, deaf: LISTEN hears nothing, e.g. behind a transaction pooler; standby: the server is in recovery), 0 for the others. Absent when the relay runs poll-only.",
	[]string{"state"}, nil)

func (c listenerState) Describe(ch chan<- *prometheus.Desc) { ch <- descListenerState }

func (c listenerState) Collect(ch chan<- prometheus.Metric) {
	cur := c.l.State()
	for _, s := range []listen.State{listen.StateConnecting, listen.StateListening, listen.StateDeaf, listen.StateStandby} {
		v := 0.0
		if s == cur {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descListenerState, prometheus.GaugeValue, v, s.String())
	}
}

// Retention returns the retention cleaner's counters, read from stats at
// scrape time. outbox-relay registers them when retention is on.
func Retention(stats func() retention.Stats) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "outbox_retention_deleted_rows_total",
			Help: "Published rows deleted by the retention cleaner.",
		}, func() float64 { return float64(stats().Deleted) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "outbox_retention_dropped_partitions_total",
			Help: "Partitions of a time-partitioned table dropped by the retention cleaner (--retention-drop-partitions).",
		}, func() float64 { return float64(stats().DroppedPartitions) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "outbox_retention_errors_total",
			Help: "Failed retention DELETE statements.",
		}, func() float64 { return float64(stats().Errors) }),
	}
}
