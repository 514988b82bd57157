package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgoutbox/outbox/internal/produce"
)

// kafkaMetrics are fed by the Kafka publisher through produce.Observer,
// which Metrics implements (set it as kafka.Config.Observer).
type kafkaMetrics struct {
	produceDur        *prometheus.HistogramVec
	partitions        *prometheus.GaugeVec
	partitionsChanged *prometheus.CounterVec
	resent            prometheus.Counter
}

// ProduceBuckets are the bounds, in seconds, of
// outbox_kafka_produce_duration_seconds: 1-2-5 steps from 0.1 ms to 10 s.
var ProduceBuckets = StatementBuckets

func newKafkaMetrics(reg *prometheus.Registry) kafkaMetrics {
	k := kafkaMetrics{
		produceDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "outbox_kafka_produce_duration_seconds",
			Help:    "Time from sending one produce request (one partition's records) to its answer, by result (ok, error): the broker's part of the commit-to-publish latency.",
			Buckets: ProduceBuckets,
		}, []string{"result"}),
		partitions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outbox_topic_partitions",
			Help: "Partition count of a topic the relay writes to, set when it changed while the relay was writing to it.",
		}, []string{"topic"}),
		partitionsChanged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_topic_partition_changes_total",
			Help: "Changes of a topic's partition count seen while publishing: aggregate IDs map to other partitions afterwards, so per-aggregate order across the change is not guaranteed to consumers.",
		}, []string{"topic"}),
	}
	k.resent = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "outbox_kafka_batches_resent_total",
		Help: "Record batches the idempotent producer (--kafka-idempotent) sent again as the same batch after an unknown outcome or a leader move; the broker writes each at most once.",
	})
	reg.MustRegister(k.produceDur, k.partitions, k.partitionsChanged, k.resent)
	return k
}

// Produced records one produce request (produce.Observer).
func (m *Metrics) Produced(d time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.kafka.produceDur.WithLabelValues(result).Observe(d.Seconds())
}

// PartitionsChanged records a change of topic's partition count
// (produce.Observer).
func (m *Metrics) PartitionsChanged(topic string, _, to int) {
	m.kafka.partitions.WithLabelValues(topic).Set(float64(to))
	m.kafka.partitionsChanged.WithLabelValues(topic).Inc()
}

// Resent records batches sent again as the same batch (produce.Observer).
func (m *Metrics) Resent(batches int) { m.kafka.resent.Add(float64(batches)) }

var _ produce.Observer = (*Metrics)(nil)
