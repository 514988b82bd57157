package relay

import (
	"errors"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/pgoutbox/outbox/lease"
)

// A relay stopped while publishes fail said "publishing works again"
// (found trying the README as a new user): shutdown ended the failure
// episode as if it had recovered. It says the failures are unresolved;
// a delivering batch still ends the episode with "works again".
func TestFailureLogEpisodes(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	f := newFailureLog(zap.New(core), 10*time.Second)
	now := time.Now()
	row := &lease.Row{ID: "e1", AggregateID: "a"}
	f.add(row, "t", errors.New("unknown topic"), false, 1)
	f.flush(now, false)
	f.add(row, "t", errors.New("unknown topic"), false, 2)
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

	f.add(row, "t", errors.New("unknown topic"), false, 1)
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
}
