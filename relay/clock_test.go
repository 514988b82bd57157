package relay

import "time"

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
