package relay

import (
	"context"
	"time"
)

// clock is the relay's one source of time: every reading of the clock,
// timer, ticker and sleep in package relay goes through the Relay's clock,
// so that a test can stub it (the model tests run the relay on a simulated
// clock). realClock, the default, is package time.
type clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that fires once after d.
	NewTimer(d time.Duration) timer
	// NewTicker returns a ticker that fires every d.
	NewTicker(d time.Duration) ticker
	// AfterFunc calls f in its own goroutine after d, unless the returned
	// stop is called first.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
	// Sleep waits d.
	Sleep(d time.Duration)
}

// timer is a *time.Timer as a clock hands it out.
type timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// ticker is a *time.Ticker as a clock hands it out.
type ticker interface {
	C() <-chan time.Time
	Stop()
}

// realClock is the wall clock of package time.
type realClock struct{}

func (realClock) Now() time.Time        { return time.Now() }
func (realClock) Sleep(d time.Duration) { time.Sleep(d) }

func (realClock) NewTimer(d time.Duration) timer { return realTimer{time.NewTimer(d)} }

func (realClock) NewTicker(d time.Duration) ticker { return realTicker{time.NewTicker(d)} }

func (realClock) AfterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }

type realTimer struct{ *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.Timer.C }

type realTicker struct{ *time.Ticker }

func (t realTicker) C() <-chan time.Time { return t.Ticker.C }

// resetTimer makes t fire d from now, whether or not it fired or was
// stopped.
func resetTimer(t timer, d time.Duration) {
	t.Stop()
	t.Reset(d)
}

// sleepCtx waits d on c (nothing when d <= 0) and returns false when ctx
// ended first.
func sleepCtx(ctx context.Context, c clock, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}
