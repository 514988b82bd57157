package metrics

import (
	"testing"
	"time"
)

func TestRefreshWaitBoundsTheGaugesDutyCycle(t *testing.T) {
	for _, c := range []struct{ interval, took, want time.Duration }{
		{5 * time.Second, 3 * time.Millisecond, 5 * time.Second},
		{5 * time.Second, 250 * time.Millisecond, 5 * time.Second},
		{5 * time.Second, 1400 * time.Millisecond, 28 * time.Second},
		{100 * time.Millisecond, 10 * time.Millisecond, 200 * time.Millisecond},
	} {
		if got := refreshWait(c.interval, c.took); got != c.want {
			t.Errorf("refreshWait(%s, %s) = %s, want %s", c.interval, c.took, got, c.want)
		}
	}
}
