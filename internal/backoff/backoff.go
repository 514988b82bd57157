// Package backoff is the one retry delay of the module: the listener's
// reconnects and the relay's claim, publish and mark retries all wait
// Delay.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Delay returns min·2^(n-1), capped at max, with ±20% jitter; n ≤ 1 gives
// min (a first retry, or a clean disconnect, still waits a little).
func Delay(min, max time.Duration, n int) time.Duration {
	d := min
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	return Jitter(d, 0.2)
}

// Jitter returns d ± frac·d, uniformly: spreads timers of several relays
// that started together.
func Jitter(d time.Duration, frac float64) time.Duration {
	return d + time.Duration(float64(d)*frac*(2*rand.Float64()-1))
}
