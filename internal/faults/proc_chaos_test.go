package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testenv"
)

// chaosDuration is how long TestProcThreeRelaysRandomKills kills relays;
// OUTBOX_FAULTS_CHAOS overrides it (e.g. 60s), -short shortens it.
func chaosDuration(t *testing.T) time.Duration {
	if v := os.Getenv("OUTBOX_FAULTS_CHAOS"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("OUTBOX_FAULTS_CHAOS=%q: %v", v, err)
		}
		return d
	}
	if testing.Short() {
		return 10 * time.Second
	}
	return time.Minute
}

// TestProcThreeRelaysRandomKills: three relay subprocesses (--lease 2s) on
// one table, 1,000 aggregates, events written at a steady rate (with some
// transactions rolled back), and every 0.5-2 s a random relay SIGKILLed
// and restarted after up to a second; sometimes two at once. In the end
// nothing is lost, nothing from a rolled-back transaction appears, and for
// every aggregate the first appearances on Kafka are in insert order.
func TestProcThreeRelaysRandomKills(t *testing.T) {
	t.Parallel()
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	topic := k.Topic(t, 8)
	dur := chaosDuration(t)

	gen := 0
	start := func(slot int) *RelayProc {
		gen++
		return startRelayProc(t, db.ConnString, k.Brokers, topic,
			"--relay-id", fmt.Sprintf("r%d-%d", slot, gen), "--lease", "2s", "--batch-size", "200")
	}
	relays := []*RelayProc{start(0), start(1), start(2)}
	for _, r := range relays {
		r.WaitReady(30 * time.Second)
	}

	// The writer: one transaction of 5 events every 10 ms (500 events/s),
	// each on a random aggregate of 1,000; every 10th transaction rolls
	// back. One goroutine, so insert order per aggregate is well defined.
	ctx, stopWriting := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var writeErr error
	var committedTx, rolledBack int
	w := writer(t, db.Pool)
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			evs := make([]outbox.Event, 5)
			for j := range evs {
				agg := fmt.Sprintf("agg-%d", rand.IntN(1000))
				evs[j] = outbox.Event{ID: outbox.NewID(), AggregateID: agg, Type: "chaos", Payload: eventPayload(i*5+j, agg)}
			}
			tx, err := db.Pool.Begin(context.Background())
			if err != nil {
				writeErr = err
				return
			}
			if err := w.Add(context.Background(), tx, evs...); err != nil {
				_ = tx.Rollback(context.Background())
				writeErr = err
				return
			}
			if i%10 == 9 {
				_ = tx.Rollback(context.Background())
				rolledBack++
				continue
			}
			if err := tx.Commit(context.Background()); err != nil {
				writeErr = err
				return
			}
			committedTx++
		}
	}()

	kills := 0
	deadline := time.Now().Add(dur)
	for time.Now().Before(deadline) {
		time.Sleep(time.Duration(500+rand.IntN(1500)) * time.Millisecond)
		victims := []int{rand.IntN(3)}
		if rand.IntN(4) == 0 {
			victims = append(victims, (victims[0]+1+rand.IntN(2))%3)
		}
		for _, v := range victims {
			if relays[v].Exited() {
				t.Fatalf("%s exited by itself: %v\n%s", relays[v].Name, relays[v].Err(), tail(relays[v].Stderr(), 5000))
			}
			relays[v].Kill()
			kills++
		}
		time.Sleep(time.Duration(rand.IntN(1000)) * time.Millisecond)
		for _, v := range victims {
			relays[v] = start(v)
		}
	}
	stopWriting()
	wg.Wait()
	if writeErr != nil {
		t.Fatalf("writer: %v", writeErr)
	}
	t.Logf("%s of chaos: %d SIGKILLs, %d transactions committed, %d rolled back", dur, kills, committedTx, rolledBack)

	rep := checkTopic(t, db.Pool, k.Brokers, topic, fmt.Sprintf("3 relays, %d random SIGKILLs in %s, 1,000 aggregates", kills, dur), 90*time.Second)
	if rep.Committed != committedTx*5 {
		t.Errorf("%d events in the table, %d committed by the writer", rep.Committed, committedTx*5)
	}
	for _, r := range relays {
		if r.Exited() {
			t.Errorf("%s exited by itself: %v", r.Name, r.Err())
		}
	}
}
