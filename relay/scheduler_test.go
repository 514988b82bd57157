package relay

import (
	"context"
	"math"
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

// The relays taking turns at the poll (pollDelay, slotDelay, turnAt)
// poll every wall-clock slot exactly once between them, inside the slot,
// whatever claims they run in between: each relay claims at its poll
// timer and, at random, when woken (a notification, another's poll), some
// of them busy (a claim every few milliseconds, their poll timers never
// firing), some with their LISTEN down (a claim at every slot), some with
// the lease's renewal cap shorter than a round of turns. An event written
// without a notification waits at most about one slot for a poll.
func TestRelaysPollEverySlotOnceWhateverTheirClaims(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for run := range 120 {
		p := time.Duration(1+rng.IntN(2000)) * time.Millisecond
		of := 2 + rng.IntN(5)
		capd := time.Duration(0)
		if rng.IntN(3) == 0 {
			capd = max(p, time.Duration(rng.Int64N(int64(of)*int64(p)))) // max(PollInterval, lease/6)
		}
		type relay struct {
			last   int64
			timer  time.Time
			gap    time.Duration // between its other claims; busy when small
			deaf   bool
			claims int
		}
		start := time.Unix(1_700_000_000+rng.Int64N(1_000_000), rng.Int64N(1e9))
		rs := make([]*relay, of)
		for i := range rs {
			rs[i] = &relay{last: math.MinInt64, gap: time.Duration(1 + rng.Int64N(int64(4*of)*int64(p))), deaf: rng.IntN(4) == 0}
			if rng.IntN(3) == 0 {
				rs[i].gap = time.Duration(1 + rng.Int64N(int64(p)/20+1)) // busy: claims many times a slot
			}
		}
		polled := map[int64][]time.Time{}
		claim := func(i int, now time.Time) {
			r := rs[i]
			shared, last := turnAt(now, p, r.last, i, of, r.deaf)
			r.last = last
			if shared {
				k := now.UnixNano() / int64(p)
				polled[k] = append(polled[k], now)
			}
			d := slotDelay(now, p, r.last, i, of, r.deaf)
			if !r.deaf && capd > 0 {
				d = min(d, capd)
			}
			r.timer = now.Add(d)
			r.claims++
		}
		for i := range rs {
			claim(i, start)
		}
		other := make([]time.Time, of)
		for i := range rs {
			other[i] = start.Add(time.Duration(rng.Int64N(int64(rs[i].gap))))
		}
		end := start.Add(40 * time.Duration(of) * p)
		for {
			i, at := -1, end
			for j, r := range rs {
				if r.timer.Before(at) {
					i, at = j, r.timer
				}
				if other[j].Before(at) {
					i, at = j, other[j]
				}
			}
			if i < 0 {
				break
			}
			if at.Equal(other[i]) {
				other[i] = at.Add(time.Duration(1 + rng.Int64N(int64(2*rs[i].gap))))
			}
			claim(i, at)
		}
		first, lastSlot := start.UnixNano()/int64(p)+1, end.UnixNano()/int64(p)-1
		for k := first; k <= lastSlot; k++ {
			at := polled[k]
			if len(at) != 1 {
				t.Fatalf("run %d: p %s, %d relays (cap %s): slot %d polled %d times, want once", run, p, of, capd, k-first, len(at))
			}
			if got := at[0].UnixNano() / int64(p); got != k {
				t.Fatalf("run %d: slot %d polled in slot %d", run, k, got)
			}
		}
	}
}
