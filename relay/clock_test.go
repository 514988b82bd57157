package relay

import (
	"sync"
	"testing"
	"time"
)

// stubClock is a clock for tests that run the relay's steps by hand on a
// simulated clock: Now is now(), Sleep returns at once, timers and
// tickers are real.
type stubClock struct {
	realClock
	now func() time.Time
}

func (c stubClock) Now() time.Time      { return c.now() }
func (c stubClock) Sleep(time.Duration) {}

// useClock makes r read the time from c.
func useClock(r *Relay, c clock) {
	r.clock = c
	r.marks.clock = c
}

// fakeClock is a clock that moves only when the test advances it: its
// timers fire then, and set is raised each time code starts a timer, so
// that a test waits for the code under test to block on the clock instead
// of sleeping and hoping.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	set    chan time.Duration // the duration of each timer started or reset
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Unix(1000, 0), set: make(chan time.Duration, 64)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(d time.Duration) { <-c.NewTimer(d).C() }

func (c *fakeClock) NewTimer(d time.Duration) timer {
	t := &fakeTimer{c: c, ch: make(chan time.Time, 1)}
	c.mu.Lock()
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	t.Reset(d)
	return t
}

func (c *fakeClock) NewTicker(time.Duration) ticker { panic("fakeClock: no tickers") }

func (c *fakeClock) AfterFunc(time.Duration, func()) func() bool { panic("fakeClock: no AfterFunc") }

// advance moves the clock by d and fires the timers due by then.
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for _, t := range c.timers {
		if t.active && !t.at.After(c.now) {
			t.active = false
			t.ch <- c.now
		}
	}
}

// started waits until code starts or resets a timer and returns its
// duration.
func (c *fakeClock) started(t *testing.T) time.Duration {
	t.Helper()
	select {
	case d := <-c.set:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("no timer started")
		return 0
	}
}

type fakeTimer struct {
	c      *fakeClock
	ch     chan time.Time
	at     time.Time
	active bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.active
	t.active = false
	return was
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	was := t.active
	t.at, t.active = t.c.now.Add(d), true
	t.c.mu.Unlock()
	t.c.set <- d
	return was
}
