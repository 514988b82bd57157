package backoff

import (
	"testing"
	"time"
)

func TestDelay(t *testing.T) {
	const lo, hi = 100 * time.Millisecond, time.Second
	for n, want := range []time.Duration{lo, lo, 2 * lo, 4 * lo, 8 * lo, hi, hi, hi} {
		for range 50 {
			d := Delay(lo, hi, n)
			if d < want*8/10 || d > want*12/10 {
				t.Fatalf("Delay(%s, %s, %d) = %s, want %s ±20%%", lo, hi, n, d, want)
			}
		}
	}
	if d := Delay(lo, hi, 1000); d > hi*12/10 {
		t.Fatalf("Delay with many failures = %s, want at most %s", d, hi*12/10)
	}
}

func TestJitter(t *testing.T) {
	for range 200 {
		if d := Jitter(time.Second, 0.1); d < 900*time.Millisecond || d > 1100*time.Millisecond {
			t.Fatalf("Jitter(1s, 0.1) = %s, want 0.9s to 1.1s", d)
		}
	}
}
