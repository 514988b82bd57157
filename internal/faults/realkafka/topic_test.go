package realkafka

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/checker"
	"github.com/pgoutbox/outbox/internal/faultkit"
	"github.com/pgoutbox/outbox/internal/testenv"
)

// realTopicFaults are the faults of TestRealKafka that change the topic or
// the broker's configuration rather than its processes.
func realTopicFaults(t *testing.T, k *testenv.TestKafka) {
	t.Run("RecordTimestampsRefused", func(t *testing.T) {
		// Every record refused INVALID_TIMESTAMP: the relay stamps records
		// with their send time, so this is the clocks' or the topic's
		// configuration, never the events'.
		r := startReal(t, k, realOpts{})
		zero := "0"
		r.setTopicConfig("message.timestamp.before.max.ms", &zero)
		r.waitFailing(30*time.Second, `"reason": "invalid_timestamp"`)
		time.Sleep(realScale(t, 20*time.Second))
		r.setTopicConfig("message.timestamp.before.max.ms", nil)
		r.finish("message.timestamp.before.max.ms refusing every record for 20 s", time.Now(), true)
	})

	t.Run("ProducerQuota", func(t *testing.T) {
		// A client quota of 20 KB/s for the relay's client.id, far below
		// the ~100 KB/s offered: the broker throttles (delays its answers
		// and mutes the connection). No failure may count, and the
		// duplicates stay few: no republish storm.
		r := startReal(t, k, realOpts{})
		name := "pgoutbox"
		entity := kadm.ClientQuotaEntity{{Type: "client-id", Name: &name}}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := r.adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{{Entity: entity,
			Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: 20000}}}}); err != nil {
			t.Fatal(err)
		}
		unquota := func() {
			if _, err := r.adm.AlterClientQuotas(context.Background(), []kadm.AlterClientQuotaEntry{{Entity: entity,
				Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Remove: true}}}}); err != nil {
				t.Errorf("remove quota: %v", err)
			}
		}
		t.Cleanup(unquota)
		time.Sleep(realScale(t, 20*time.Second))
		unquota()
		end := time.Now()
		r.finish("producer_byte_rate 20 KB/s against ~100 KB/s offered for 20 s", end, true)
		rep := r.report()
		if rep.Duplicates > rep.Committed/20 {
			t.Errorf("%d duplicates of %d events under a quota: a republish storm", rep.Duplicates, rep.Committed)
		}
	})

	t.Run("OversizedRecords", func(t *testing.T) {
		// The topic's max.message.bytes below the relay's record limit:
		// those records are dead-lettered at once, the other events flow.
		r := startReal(t, k, realOpts{})
		limit := "4096"
		r.setTopicConfig("max.message.bytes", &limit)
		w := faultkit.Writer(t, r.db.Pool)
		big := make([]outbox.Event, 10)
		for i := range big {
			agg := fmt.Sprintf("big-%d", i)
			big[i] = outbox.Event{ID: outbox.NewID(), AggregateID: agg, Type: "fault.big",
				Payload: []byte(fmt.Sprintf(`{"pad":%q}`, strings.Repeat("x", 6000)))}
			faultkit.Insert(t, r.db.Pool, w, big[i])
			time.Sleep(100 * time.Millisecond)
		}
		testenv.Eventually(t, 20*time.Second, func() bool {
			return faultkit.Count(t, r.db.Pool, "SELECT count(*) FROM outbox WHERE dead_lettered_at IS NOT NULL") == len(big)
		}, "the oversized records were not dead-lettered")
		r.waitPublished(20*time.Second, 500, "publishing after the oversized records")
		r.load.Stop()
		if n := faultkit.Count(t, r.db.Pool, `SELECT count(*) FROM outbox WHERE dead_lettered_at IS NOT NULL
			AND (aggregate_id NOT LIKE 'big-%' OR attempts > 1 OR last_error NOT LIKE '%Message Size Too Large%')`); n != 0 {
			t.Errorf("%d dead letters that are not the oversized records, dead-lettered at once for their size", n)
		}
		testenv.Eventually(t, 20*time.Second, func() bool {
			return faultkit.Count(t, r.db.Pool, "SELECT count(*) FROM outbox WHERE published_at IS NULL AND dead_lettered_at IS NULL") == 0
		}, "the other events were not all published")
		r.checkPublished("10 records over the topic's max.message.bytes among 500 events/s")
	})

	t.Run("PartitionsAdded", func(t *testing.T) {
		// Partitions added while two relays publish: keys remap. The relay
		// says so (topic, both counts); within each partition every
		// aggregate stays in order, and nothing is lost.
		r := startReal(t, k, realOpts{relays: 2})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := r.adm.UpdatePartitions(ctx, 12, r.topic); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 30*time.Second, func() bool {
			return r.relayLogged("partition count changed") && r.relayLogged("partitions_before")
		}, "no relay said that the topic's partition count changed%s", r.logs())
		r.waitPublished(20*time.Second, 500, "publishing after partitions were added")
		r.load.Stop()
		testenv.Eventually(t, 20*time.Second, func() bool { return faultkit.Unpublished(t, r.db.Pool) == 0 }, "not everything published")
		exp, obs := r.observe()
		rep := checker.Check(exp, obs)
		if rep.Lost != 0 || rep.Phantoms != 0 || rep.PayloadMismatches != 0 {
			t.Errorf("checker: %v", rep)
		}
		if v := orderWithinPartitions(exp, obs); v != 0 {
			t.Errorf("%d events out of order within their partition", v)
		}
		faultkit.MatrixRow(t, "partitions 6 -> 12 while 2 relays publish (order checked within each partition)", rep)
	})

	t.Run("TopicRecreated", func(t *testing.T) {
		// The topic deleted while publishing and created again 10 s later:
		// the events committed meanwhile wait (no dead letter, no attempt
		// counted) and go to the new topic, in order.
		r := startReal(t, k, realOpts{})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := r.adm.DeleteTopics(ctx, r.topic); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 30*time.Second, func() bool {
			md, err := r.adm.Metadata(ctx, r.topic)
			return err == nil && md.Topics[r.topic].Err != nil
		}, "topic still in the metadata after its deletion")
		gone := time.Now()
		time.Sleep(realScale(t, 10*time.Second))
		if _, err := r.adm.CreateTopic(ctx, int32(r.opts.partitions), -1, nil, r.topic); err != nil {
			t.Fatal(err)
		}
		end := time.Now()
		time.Sleep(time.Until(end.Add(5 * time.Second)))
		r.load.Stop()
		testenv.Eventually(t, 10*time.Second, func() bool { return faultkit.Unpublished(t, r.db.Pool) == 0 },
			"events not all published 10 s after the writer stopped, 15 s after the topic was created again%s", r.logs())
		if n := faultkit.Count(t, r.db.Pool, "SELECT count(*) FROM outbox WHERE dead_lettered_at IS NOT NULL OR attempts > 0"); n != 0 {
			t.Errorf("%d events dead-lettered or counting attempts for a missing topic", n)
		}
		// Only what was committed after the old topic was gone is sure to
		// be on the new one.
		exp, obs := r.observe()
		var after []checker.Expected
		for _, e := range exp {
			if e.Seq > r.seqAt(gone) {
				after = append(after, e)
			}
		}
		rep := checker.Check(after, dropUnexpected(after, obs))
		if !rep.OK() {
			t.Errorf("checker: %v", rep)
		}
		faultkit.MatrixRow(t, "topic deleted while publishing, created again 10 s later (events committed after the deletion)", rep)
	})

	t.Run("AutoCreateTopic", func(t *testing.T) {
		// --kafka-auto-create-topics on a cluster that allows it: the
		// relay's topic is created on first use.
		db := testenv.MigratedDB(t)
		topic := testenv.TopicName(t)
		p := faultkit.StartRelay(t, db.ConnString, k.Brokers, topic, "--kafka-auto-create-topics")
		p.WaitReady(60 * time.Second)
		faultkit.WriteEvents(t, db.Pool, 50, 5)
		testenv.Eventually(t, 30*time.Second, func() bool { return faultkit.Unpublished(t, db.Pool) == 0 }, "not published to the auto-created topic:\n%s", faultkit.Tail(p.Stderr(), 4000))
		faultkit.CheckTopic(t, db.Pool, k.Brokers, topic, "topic created by the relay (--kafka-auto-create-topics)", 30*time.Second)
	})
}

// waitFailing waits until a relay logged a failure naming what.
func (r *realRun) waitFailing(timeout time.Duration, what string) {
	r.t.Helper()
	if !faultkit.Wait(timeout, func() bool { return r.relayLogged(what) }) {
		r.t.Fatalf("no relay logged %s within %s%s", what, timeout, r.logs())
	}
}

// observe returns the table's events and what the topic holds.
func (r *realRun) observe() ([]checker.Expected, []checker.Observed) {
	r.t.Helper()
	ctx := context.Background()
	exp, err := checker.ExpectedFromTable(ctx, r.db.Pool, "outbox")
	if err != nil {
		r.t.Fatal(err)
	}
	obs, err := checker.ObserveTopic(ctx, r.k.Brokers, r.topic, len(exp), 60*time.Second)
	if err != nil {
		r.t.Fatal(err)
	}
	return exp, obs
}

// report checks the topic against the table without failing the test.
func (r *realRun) report() checker.Report {
	exp, obs := r.observe()
	return checker.Check(exp, obs)
}

// checkPublished checks the topic against the table's published rows.
func (r *realRun) checkPublished(name string) {
	r.t.Helper()
	exp, obs := r.observe()
	var published []checker.Expected
	dead := map[string]bool{}
	rows, err := r.db.Pool.Query(context.Background(), "SELECT id::text FROM outbox WHERE dead_lettered_at IS NOT NULL")
	if err != nil {
		r.t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			r.t.Fatal(err)
		}
		dead[id] = true
	}
	rows.Close()
	for _, e := range exp {
		if !dead[e.ID.String()] {
			published = append(published, e)
		}
	}
	rep := checker.Check(published, obs)
	faultkit.MatrixRow(r.t, name, rep)
	if !rep.OK() {
		r.t.Errorf("checker: %v", rep)
	}
}

// seqAt returns the highest seq committed at or before at.
func (r *realRun) seqAt(at time.Time) int64 {
	var seq int64
	if err := r.db.Pool.QueryRow(context.Background(), "SELECT coalesce(max(seq), 0) FROM outbox WHERE created_at <= $1", at).Scan(&seq); err != nil {
		r.t.Fatal(err)
	}
	return seq
}

// dropUnexpected returns the records of obs whose event is in exp.
func dropUnexpected(exp []checker.Expected, obs []checker.Observed) []checker.Observed {
	want := make(map[string]bool, len(exp))
	for _, e := range exp {
		want[e.ID.String()] = true
	}
	var out []checker.Observed
	for _, o := range obs {
		if want[o.EventID] {
			out = append(out, o)
		}
	}
	return out
}

// orderWithinPartitions counts events whose first appearance on their
// partition comes after that of a later event of their aggregate on the
// same partition.
func orderWithinPartitions(exp []checker.Expected, obs []checker.Observed) int {
	seq := make(map[string]int64, len(exp))
	for _, e := range exp {
		seq[e.ID.String()] = e.Seq
	}
	type key struct {
		agg  string
		part int32
	}
	seen := map[string]bool{}
	last := map[key]int64{}
	violations := 0
	for _, o := range obs {
		s, ok := seq[o.EventID]
		if !ok || seen[o.EventID] {
			continue
		}
		seen[o.EventID] = true
		k := key{o.Key, o.Partition}
		if s < last[k] {
			violations++
		}
		last[k] = max(last[k], s)
	}
	return violations
}
