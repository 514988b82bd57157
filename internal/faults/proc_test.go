package faults

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgoutbox/outbox/internal/checker"
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
	if err := r.WaitTimeout(10 * time.Second); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
}

// TestProcKilledAfterPublishBeforeMark: a relay whose database connections
// go through a proxy publishes a batch; the proxy is blackholed from inside
// the broker's handling of the first produce request, so the relay's mark
// can never reach Postgres; the relay is SIGKILLed once the records are on
// Kafka. A second relay takes the rows over when the 2 s lease ends and
// publishes them again with the same event_id: nothing lost, the extra
// copies are duplicates of committed events.
func TestProcKilledAfterPublishBeforeMark(t *testing.T) {
	t.Parallel()
	db := testenv.MigratedDB(t)
	k := testenv.KafkaFake(t)
	topic := k.Topic(t, 2)
	ctx := context.Background()

	dsn, proxy := proxiedDSN(t, db.ConnString)
	a := startRelayProc(t, dsn, k.Brokers, topic, "--relay-id", "victim", "--lease", "2s")
	a.WaitReady(30 * time.Second)

	var blackholed atomic.Bool
	k.Cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		if blackholed.CompareAndSwap(false, true) {
			proxy.Blackhole() // before the broker appends and acks: the mark cannot happen
		}
		k.Cluster.DropControl()
		return nil, nil, false // the broker handles the produce normally
	})

	const n = 100
	writeEvents(t, db.Pool, n, 10)

	obs, err := checker.NewObserver(ctx, k.Brokers, topic)
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Stop()
	testenv.Eventually(t, 20*time.Second, func() bool { return obs.Records() > 0 }, "no record published by the first relay")
	if !blackholed.Load() {
		t.Fatal("records appeared but the produce hook did not run")
	}
	// The victim has published; its mark is stuck in the blackhole. Give
	// the in-flight produce requests of the batch (one per partition) a
	// moment to be acked too, then kill it.
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_ = obs.WaitCaughtUp(wctx)
	cancel()
	a.Kill()
	proxy.Restore() // the proxy is innocent now; the victim is gone

	firstCopies := obs.Stop()
	firstIDs := map[string]bool{}
	for _, o := range firstCopies {
		firstIDs[o.EventID] = true
	}
	var unmarked int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE published_at IS NULL AND id::text = ANY($1)", keys(firstIDs)).Scan(&unmarked); err != nil {
		t.Fatal(err)
	}
	if unmarked != len(firstIDs) || unmarked == 0 {
		t.Fatalf("%d events on Kafka before the kill, %d of them unmarked; want all unmarked", len(firstIDs), unmarked)
	}
	t.Logf("killed the relay with %d events published and not marked", unmarked)

	b := startRelayProc(t, db.ConnString, k.Brokers, topic, "--relay-id", "successor", "--lease", "2s")
	b.WaitReady(30 * time.Second)
	// The successor marks the rows once it has published them again.
	testenv.Eventually(t, 20*time.Second, func() bool {
		var left int
		_ = db.Pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE published_at IS NULL").Scan(&left)
		return left == 0
	}, "rows left unmarked: the successor did not take over")

	exp, err := checker.ExpectedFromTable(ctx, db.Pool, "outbox")
	if err != nil {
		t.Fatal(err)
	}
	all, err := checker.ObserveTopic(ctx, k.Brokers, topic, len(exp), 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rep := checker.Check(exp, all)
	matrixRow(t, "SIGKILL after publish, before mark", rep)
	if !rep.OK() || rep.Delivered != n {
		t.Fatalf("checker: %v", rep)
	}
	if rep.Duplicates < unmarked {
		t.Fatalf("%d duplicates, want at least the %d events published before the kill again", rep.Duplicates, unmarked)
	}
	// Every event of the first publish came again, with the same event_id.
	copies := map[string]int{}
	for _, o := range all {
		copies[o.EventID]++
	}
	for id := range firstIDs {
		if copies[id] < 2 {
			t.Errorf("event %s published before the kill appears %d time(s), want it again", id, copies[id])
		}
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
