package realkafka

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// TestRealKafka runs the faults of a real three-broker Apache Kafka 4.4.0
// cluster (replication factor 3, min.insync.replicas 2) against relay
// processes, each while a writer commits 500 events/s over 100 hot
// aggregates and goes on for 5 s after the fault ends: nothing lost,
// every aggregate in order, no dead letter and no counted attempt from a
// condition of the cluster, and every event published within 10 s of the
// fault's end. The faults share the cluster, so they run one after the
// other; the whole test runs in parallel with the package's kfake tests.
func TestRealKafka(t *testing.T) {
	t.Parallel()
	k := realCluster(t)

	// The case that dead-lettered healthy events of every aggregate and
	// stalled the relay for good: the topic's min.insync.replicas raised to
	// 3 and one broker killed, so every produce is answered
	// NOT_ENOUGH_REPLICAS, at --max-attempts 3, with one relay and with
	// three.
	for _, relays := range []int{3, 1} {
		t.Run(map[int]string{1: "ISRBelowMinimum/1relay", 3: "ISRBelowMinimum/3relays"}[relays], func(t *testing.T) {
			r := startReal(t, k, realOpts{relays: relays, args: []string{"--max-attempts", "3"}})
			three, two := "3", "2"
			r.setTopicConfig("min.insync.replicas", &three)
			victim := 3
			t.Cleanup(func() { healNodes(t, k, victim) })
			if err := k.Real.Node(victim).Kill(); err != nil {
				t.Fatal(err)
			}
			hold := realScale(t, 60*time.Second)
			time.Sleep(hold)
			healNodes(t, k, victim)
			r.waitISR(3, 2*time.Minute)
			r.setTopicConfig("min.insync.replicas", &two)
			end := time.Now()
			if !r.relayLogged("Kafka outage: publishes fail for a condition of the cluster") {
				t.Errorf("no relay logged the outage%s", r.logs())
			}
			r.finish("ISR below min.insync.replicas for "+hold.String(), end, true)
		})
	}

	t.Run("LeaderKilled", func(t *testing.T) {
		r := startReal(t, k, realOpts{})
		_, leader := r.leaders()
		t.Cleanup(func() { healNodes(t, k, leader) })
		if err := k.Real.Node(leader).Kill(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(realScale(t, 15*time.Second))
		healNodes(t, k, leader)
		r.waitISR(3, 2*time.Minute) // the fault ends when the cluster is whole again
		r.finish("the leader of most partitions SIGKILLed, restarted 15 s later", time.Now(), true)
	})

	t.Run("BrokerPaused", func(t *testing.T) {
		r := startReal(t, k, realOpts{aggregates: 1000})
		_, leader := r.leaders()
		t.Cleanup(func() { healNodes(t, k, leader) })
		if err := k.Real.Node(leader).Pause(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(realScale(t, 30*time.Second))
		if err := k.Real.Node(leader).Resume(); err != nil {
			t.Fatal(err)
		}
		r.waitISR(3, 2*time.Minute)
		r.finish("the leader of most partitions SIGSTOPped for 30 s", time.Now(), true)
	})

	t.Run("TwoOfThreeDown", func(t *testing.T) {
		r := startReal(t, k, realOpts{})
		t.Cleanup(func() { healNodes(t, k, 1, 2) })
		for _, id := range []int{1, 2} {
			if err := k.Real.Node(id).Kill(); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(realScale(t, 60*time.Second))
		healNodes(t, k, 1, 2)
		r.waitISR(3, 2*time.Minute)
		r.finish("two of three brokers SIGKILLed for 60 s", time.Now(), true)
	})

	t.Run("ReassignmentAndElection", func(t *testing.T) {
		r := startReal(t, k, realOpts{aggregates: 1000})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// Every partition's replica list rotated (so its preferred leader
		// moves), then the preferred leaders elected, while publishing.
		md, err := r.adm.Metadata(ctx, r.topic)
		if err != nil {
			t.Fatal(err)
		}
		var req kadm.AlterPartitionAssignmentsReq
		var parts kadm.TopicsSet
		for _, p := range md.Topics[r.topic].Partitions {
			reps := append(append([]int32{}, p.Replicas[1:]...), p.Replicas[0])
			req.Assign(r.topic, p.Partition, reps)
			parts.Add(r.topic, p.Partition)
		}
		if _, err := r.adm.AlterPartitionAssignments(ctx, req); err != nil {
			t.Fatal(err)
		}
		r.waitPublished(20*time.Second, 500, "publishing during the reassignment")
		if _, err := r.adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, parts); err != nil {
			t.Logf("elect preferred leaders: %v", err)
		}
		r.waitPublished(20*time.Second, 500, "publishing after the election")
		r.finish("partition reassignment and preferred-leader election while publishing", time.Now(), true)
	})

	// Issue 30's storm, with the idempotent producer: the leader of most
	// partitions SIGKILLed and restarted, then NOT_ENOUGH_REPLICAS for 20 s,
	// then two brokers SIGSTOPped for 15 s, the relays publishing
	// throughout. Every produce retried after an unknown outcome is the
	// same batch: with one relay no copy in the topic (kafka-go's Writer
	// wrote 39 of 34,705 in the same storm); with three, copies could come
	// only from ownership moves, and the relays stay up: counted, logged.
	// The same storm with --kafka-fence (every write a transaction, the
	// coordinators on the same brokers): nothing lost, and the whole log,
	// aborted records included, keeps every aggregate's order.
	for _, v := range []struct {
		name   string
		relays int
		args   []string
	}{
		{"StormIdempotent/1relays", 1, []string{"--kafka-idempotent"}},
		{"StormIdempotent/3relays", 3, []string{"--kafka-idempotent"}},
		{"StormFenced/3relays", 3, []string{"--kafka-idempotent", "--kafka-fence"}},
	} {
		relays := v.relays
		t.Run(v.name, func(t *testing.T) {
			r := startReal(t, k, realOpts{relays: relays, args: v.args})
			_, leader := r.leaders()
			t.Cleanup(func() { healNodes(t, k, 1, 2, 3) })
			if err := k.Real.Node(leader).Kill(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(realScale(t, 15*time.Second))
			healNodes(t, k, leader)
			r.waitISR(3, 2*time.Minute)

			three, two := "3", "2"
			r.setTopicConfig("min.insync.replicas", &three)
			victim := 1 + leader%3
			if err := k.Real.Node(victim).Kill(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(realScale(t, 20*time.Second))
			healNodes(t, k, victim)
			r.waitISR(3, 2*time.Minute)
			r.setTopicConfig("min.insync.replicas", &two)

			paused := []int{1 + victim%3, 1 + (victim+1)%3}
			for _, id := range paused {
				if err := k.Real.Node(id).Pause(); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(realScale(t, 15*time.Second))
			for _, id := range paused {
				if err := k.Real.Node(id).Resume(); err != nil {
					t.Fatal(err)
				}
			}
			r.waitISR(3, 2*time.Minute)
			rep := r.finish(fmt.Sprintf("storm: leader SIGKILLed, NOT_ENOUGH_REPLICAS, two brokers SIGSTOPped (%s, %d relays)", strings.Join(v.args, " "), relays), time.Now(), true)
			breaks := r.logOrder()
			t.Logf("%s: %d copies of %d events; %d breaks of order in the log (aborted records included)", v.name, rep.Duplicates, rep.Committed, breaks)
			if relays == 1 && rep.Duplicates != 0 {
				t.Errorf("%d copies of %d events with the idempotent producer, want 0", rep.Duplicates, rep.Committed)
			}
			if slices.Contains(v.args, "--kafka-fence") && breaks != 0 {
				t.Errorf("%d records lie in the log after later events of their aggregate with --kafka-fence, want 0", breaks)
			}
		})
	}

	realTopicFaults(t, k)
}
