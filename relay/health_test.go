package relay

import (
	"errors"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/pgoutbox/outbox/internal/produce"
)

// TestHealthBrokerOutageIsOneStall: rows that get through while the broker
// leaves other publishes unanswered (a chunk split by the outage's start)
// do not end the stall, and the relay is not "moving" while it pauses its
// claims for the outage; a publish the broker answers in full ends it.
func TestHealthBrokerOutageIsOneStall(t *testing.T) {
	p := progress{stallAfter: 2 * time.Second}
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	timeout := produce.ErrNotAttempted // a message the broker never answered
	if !produce.IsOutage(timeout) {
		t.Fatal("produce.ErrNotAttempted is not unreachable")
	}

	p.claimedRows(at(0))
	if h := p.health(at(1 * time.Second)); !h.Moving {
		t.Fatalf("stalled after 1s: %+v", h)
	}
	if h := p.health(at(3 * time.Second)); h.Moving || h.Step != "publish" {
		t.Fatalf("not stalled on publish after 3s of claimed rows: %+v", h)
	}
	// A chunk that started at 0 comes back at 3s: 2 rows through, 1 unanswered.
	p.resolved()
	p.publishAnswered(at(0), resultsOf(nil, timeout, nil))
	// Claims paused for the outage: nothing claimed, nothing waiting.
	for _, d := range []time.Duration{3500 * time.Millisecond, 5 * time.Second, 9 * time.Second} {
		if h := p.health(at(d)); h.Moving || h.Step != "publish" || !h.Since.Equal(at(0)) {
			t.Fatalf("at %s during the outage: %+v, want stalled on publish since 0", d, h)
		}
	}
	// Claims again, still unanswered.
	p.claimedRows(at(10 * time.Second))
	p.publishAnswered(at(10*time.Second), resultsOf(timeout))
	if h := p.health(at(11 * time.Second)); h.Moving || !h.Since.Equal(at(0)) {
		t.Fatalf("after another unanswered publish: %+v, want the same stall since 0", h)
	}
	// The broker answers: a rejected record is an answer too.
	p.publishAnswered(at(12*time.Second), resultsOf(nil, errors.New("record rejected")))
	p.resolved()
	if h := p.health(at(12 * time.Second)); !h.Moving {
		t.Fatalf("after a publish answered in full: %+v, want moving", h)
	}
}

// A cluster condition (NOT_ENOUGH_REPLICAS on a real cluster) stalls the
// publish step like an unreachable broker, and the reason names it and the
// partition's leader as the publisher explained it.
func TestHealthNamesTheClusterCondition(t *testing.T) {
	p := progress{stallAfter: time.Second}
	t0 := time.Unix(1000, 0)
	cond := &produce.PartitionError{Topic: "payments", Partition: 3, Leader: 2, Broker: "127.0.0.1:9093",
		Replicas: []int32{1, 2, 3}, ISR: []int32{2}, Err: kafkago.NotEnoughReplicas}
	p.claimedRows(t0)
	p.publishAnswered(t0, []produce.Result{{Outcome: produce.Unsent, Err: produce.ErrNotAttempted}, produce.ResultOf(cond)})
	h := p.health(t0.Add(2 * time.Second))
	want := "publishes fail for a condition of the Kafka cluster for 2s: last error: not_enough_replicas: payments/3 (leader 2 at 127.0.0.1:9093, in-sync replicas [2] of [1 2 3]): [19] Not Enough Replicas"
	if h.Moving || h.Step != "publish" || h.Reason != want {
		t.Fatalf("health = %+v\nwant reason %q", h, want)
	}
}

// resultsOf is the Result of each error, as the publisher gives them.
func resultsOf(errs ...error) []produce.Result {
	res := make([]produce.Result, len(errs))
	for i, err := range errs {
		res[i] = produce.ResultOf(err)
	}
	return res
}
