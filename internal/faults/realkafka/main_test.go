// Package realkafka holds the fault suite of a real Apache Kafka cluster
// (tests only): relay processes from internal/faultkit against brokers of
// internal/kafkatemp that are killed, paused, fenced from their quorum and
// reconfigured through the admin API while a writer commits events. It
// is a package of its own so that it runs beside internal/faults.
package realkafka

import (
	"testing"

	"github.com/pgoutbox/outbox/internal/faultkit"
	"github.com/pgoutbox/outbox/internal/testenv"
)

func TestMain(m *testing.M) {
	faultkit.SweepStaleBinDirs()
	testenv.Main(m)
}
