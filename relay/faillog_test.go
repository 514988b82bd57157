package relay

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/produce"
)

// A relay stopped while publishes fail said "publishing works again"
// (found trying the README as a new user): shutdown ended the failure
// episode as if it had recovered. It says the failures are unresolved;
// a delivering batch still ends the episode with "works again".
func TestFailureLogEpisodes(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	f := newFailureLog(zap.New(core), 10*time.Second)
	now := time.Now()
	row := &claim.Row{ID: "e1", AggregateID: "a"}
	f.add(now, row, "t", produce.ResultOf(errors.New("unknown topic")), false, 1)
	f.flush(now, false)
	f.add(now, row, "t", produce.ResultOf(errors.New("unknown topic")), false, 2)
	f.stop(now.Add(time.Second))
	var msgs []string
	for _, e := range logs.TakeAll() {
		msgs = append(msgs, e.Message)
	}
	want := []string{"publish failed; will retry", "publish failed; will retry", "relay stopping while publishes fail; the events are retried by the next relay to claim them"}
	if len(msgs) != len(want) {
		t.Fatalf("logged %q, want %q", msgs, want)
	}
	for i := range want {
		if msgs[i] != want[i] {
			t.Fatalf("logged %q, want %q", msgs, want)
		}
	}

	f.add(now, row, "t", produce.ResultOf(errors.New("unknown topic")), false, 1)
	f.flush(now, false)
	f.flush(now.Add(time.Second), true)
	f.stop(now.Add(2 * time.Second))
	msgs = msgs[:0]
	for _, e := range logs.TakeAll() {
		msgs = append(msgs, e.Message)
	}
	if len(msgs) != 2 || msgs[1] != "publishing works again" {
		t.Fatalf("after a delivering batch: logged %q, want a failure and \"publishing works again\", nothing at stop", msgs)
	}

	// A relay that stops with only dead letters behind it has nothing
	// failing to warn of (a user took the warning for an alarm).
	f.add(now, row, "t", produce.ResultOf(errors.New("unknown topic")), true, 1)
	f.flush(now, false)
	f.stop(now.Add(time.Second))
	msgs = msgs[:0]
	for _, e := range logs.TakeAll() {
		msgs = append(msgs, e.Message)
	}
	if len(msgs) != 1 || !strings.HasPrefix(msgs[0], "events dead-lettered") {
		t.Fatalf("stopping after a dead letter: logged %q, want the dead letter's line only", msgs)
	}
}

// An outage (NOT_ENOUGH_REPLICAS for 60 s on a real cluster) logged a
// warning per kind every 10 s and counted attempts; now it is one error
// line when it begins and one info line once publishes have gone through
// for 5 s, however long it lasts and however it flickers at its end. A dead letter alone is not followed by "works
// again": nothing was waiting.
func TestFailureLogOutageIsTwoLines(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	f := newFailureLog(zap.New(core), 10*time.Second)
	now := time.Now()
	row := &claim.Row{ID: "e1", AggregateID: "a"}
	for i := range 100 {
		at := now.Add(time.Duration(i) * time.Second)
		f.add(at, row, "t", produce.ResultOf(kafkago.NotEnoughReplicas), false, 0)
		f.flush(at, false)
	}
	// Back: a batch goes through, another publish fails at once (a
	// partition whose leader is not elected yet), then 5 s of success.
	f.flush(now.Add(101*time.Second), true)
	f.add(now.Add(102*time.Second), row, "t", produce.ResultOf(kafkago.NotLeaderForPartition), false, 0)
	f.flush(now.Add(102*time.Second), false)
	f.flush(now.Add(103*time.Second), true)
	f.tick(now.Add(107 * time.Second))
	f.tick(now.Add(108 * time.Second))
	var msgs []string
	for _, e := range logs.TakeAll() {
		msgs = append(msgs, e.Message)
	}
	want := []string{
		"Kafka outage: publishes fail for a condition of the cluster; events wait and are retried, no attempt counted",
		"Kafka outage over: publishing again",
	}
	if !slices.Equal(msgs, want) {
		t.Fatalf("logged %q, want %q", msgs, want)
	}

	f.add(now, row, "t", produce.ResultOf(kafkago.MessageSizeTooLarge), true, 1)
	f.flush(now, false)
	f.flush(now.Add(time.Second), true)
	msgs = msgs[:0]
	for _, e := range logs.TakeAll() {
		msgs = append(msgs, e.Message)
	}
	if len(msgs) != 1 || !strings.HasPrefix(msgs[0], "events dead-lettered") {
		t.Fatalf("after one dead letter: logged %q, want only the dead-letter line", msgs)
	}
}
