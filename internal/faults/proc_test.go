package faults

import (
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/testenv"
)

// TestProcRelayDelivers is the baseline: one relay subprocess, no fault.
func TestProcRelayDelivers(t *testing.T) {
	t.Parallel()
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	topic := k.Topic(t, 4)
	r := startRelayProc(t, db.ConnString, k.Brokers, topic)
	r.WaitReady(30 * time.Second)
	writeEvents(t, db.Pool, 500, 20)
	rep := checkTopic(t, db.Pool, k.Brokers, topic, "none (baseline)", 30*time.Second)
	if rep.Delivered != 500 {
		t.Fatalf("delivered %d of 500", rep.Delivered)
	}
	r.Term()
	if err := r.Wait(10 * time.Second); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
}
