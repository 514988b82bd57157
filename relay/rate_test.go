package relay

import (
	"math"
	"testing"
	"time"
)

func TestArrivalRateAveragesOverItsWindow(t *testing.T) {
	for _, tc := range []struct {
		perMs float64
		want  float64
	}{{1, 1000}, {6, 6000}} {
		rate := 0.0
		// Claims every 500µs find the events of the last 500µs, one claim
		// finding them all in a burst now and then.
		for i := 0; i < 1000; i++ {
			n := 0
			if i%2 == 0 {
				n = int(tc.perMs)
			}
			rate = arrivalRate(rate, n, 500*time.Microsecond)
		}
		if math.Abs(rate-tc.want)/tc.want > 0.1 {
			t.Errorf("%v events/ms: rate %.0f/s, want about %.0f/s", tc.perMs, rate, tc.want)
		}
	}
	// A burst of 3 events at a low rate does not look busy (over 2,000/s).
	rate := 0.0
	for i := 0; i < 100; i++ {
		rate = arrivalRate(rate, 0, time.Millisecond)
	}
	if rate = arrivalRate(rate, 3, 500*time.Microsecond); rate >= 2000 {
		t.Errorf("one burst of 3 events reads as %.0f/s", rate)
	}
}
