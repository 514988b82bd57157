package relay

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/pgoutbox/outbox/lease"
)

// TestClaimTimerWaitsOnTheClock runs the claimer's waits on a fake clock,
// without a database: it claims at once on start; a notification right
// after a claim waits ClaimWindowPoll after it (the debounce); the fallback
// poll fires after PollInterval; an outage pause holds the claimer back
// until it ends. Each step waits for the claimer to start its timer (a
// test signal), then moves the clock.
func TestClaimTimerWaitsOnTheClock(t *testing.T) {
	c := newFakeClock()
	wake := make(chan struct{}, 1)
	cfg := Config{PollInterval: time.Second, ClaimWindowPoll: 10 * time.Millisecond}.WithDefaults()
	r := &Relay{cfg: cfg, lease: lease.Config{BatchSize: 100}, wake: wake, log: zap.NewNop(), clock: c, gate: newClaimGate()}
	ctx := context.Background()
	ct := newScheduler(r)
	defer ct.stop()
	if d := c.started(t); d < 900*time.Millisecond || d > 1100*time.Millisecond {
		t.Fatalf("poll timer %v, want PollInterval ±10%%", d)
	}
	c.started(t) // the claim-window timer, stopped at once

	waitAsync := func() <-chan bool {
		done := make(chan bool, 1)
		go func() { done <- ct.wait(ctx) }()
		return done
	}
	returned := func(done <-chan bool, what string) {
		t.Helper()
		select {
		case ok := <-done:
			if !ok {
				t.Fatalf("%s: wait returned false", what)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: wait did not return", what)
		}
	}

	// On start: at once.
	returned(waitAsync(), "start")
	if d := c.started(t); d < 900*time.Millisecond {
		t.Fatalf("the claim restarted the poll timer with %v, want PollInterval ±10%%", d)
	}
	ct.claimed(0, false, 0)

	// A notification 1ms after the claim began: the claim waits until
	// ClaimWindowPoll after it.
	c.advance(time.Millisecond)
	wake <- struct{}{}
	done := waitAsync()
	if d := c.started(t); d != 9*time.Millisecond {
		t.Fatalf("debounce timer %v, want 9ms (ClaimWindowPoll after the last claim)", d)
	}
	select {
	case <-done:
		t.Fatal("wait returned before the debounce ended")
	default:
	}
	c.advance(9 * time.Millisecond)
	returned(done, "notification")
	c.started(t) // the poll timer, restarted by the claim
	ct.claimed(0, false, 0)

	// Nothing happens: the poll timer fires after PollInterval.
	done = waitAsync()
	c.advance(1100 * time.Millisecond)
	returned(done, "poll")
	c.started(t)
	ct.claimed(0, false, 0)

	// An outage pause of 2s: a notification waits it out.
	r.gate.pause(c.Now().Add(2 * time.Second))
	wake <- struct{}{}
	done = waitAsync()
	if d := c.started(t); d != 10*time.Millisecond {
		t.Fatalf("debounce timer %v, want 10ms", d)
	}
	c.advance(10 * time.Millisecond)
	if d := c.started(t); d != 1990*time.Millisecond {
		t.Fatalf("pause timer %v, want what is left of the 2s pause", d)
	}
	c.advance(1990 * time.Millisecond)
	returned(done, "pause")

	if n, p, b := r.stats.wakeNotify.Load(), r.stats.wakePoll.Load(), r.stats.wakeBacklog.Load(); n != 2 || p != 1 || b != 1 {
		t.Fatalf("wake-ups: %d notify, %d poll, %d backlog; want 2, 1, 1", n, p, b)
	}
}

// turnDelay gives each of the relays taking turns at the poll its own
// wall-clock slots: whatever the time, the delay is at least the poll
// interval and less than one more round of turns, it ends on a slot
// boundary whose slot number mod the relays is the turn, and the relays'
// next polls fall in distinct slots.
func TestTurnDelayGivesEachRelayItsOwnSlots(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		p := time.Duration(1+rng.IntN(2000)) * time.Millisecond
		of := 2 + rng.IntN(6)
		now := time.Unix(1_700_000_000+rng.Int64N(1_000_000), rng.Int64N(1e9))
		slots := map[int64]bool{}
		for turn := range of {
			d := turnDelay(now, p, turn, of)
			at := now.Add(d).UnixNano()
			if d < p || d >= p+time.Duration(of)*p {
				t.Fatalf("p %s, turn %d of %d at %s: delay %s, want in [p, p+%d p)", p, turn, of, now, d, of)
			}
			if at%int64(p) != 0 || (at/int64(p))%int64(of) != int64(turn) {
				t.Fatalf("p %s, turn %d of %d at %s: fires at %d, not at the start of one of its slots", p, turn, of, now, at)
			}
			slots[at] = true
		}
		if len(slots) != of {
			t.Fatalf("p %s, %d relays at %s share slots: %d distinct", p, of, now, len(slots))
		}
	}
}
