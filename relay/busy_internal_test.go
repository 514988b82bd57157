package relay

import "testing"

// TestBusyIsTheTablesRate: a relay owning a third of the key partitions
// is busy at a third of busyRate, when the table as a whole is; one
// owning everything, or not knowing yet, at busyRate.
func TestBusyIsTheTablesRate(t *testing.T) {
	for _, c := range []struct {
		rate, share float64
		want        bool
	}{
		{1999, 1, false}, {2000, 1, true},
		{1999, 0, false}, {2000, 0, true}, // no ownership known yet: all
		{700, 85.0 / 256, true}, {600, 85.0 / 256, false},
		{1000, 0.5, true}, {999, 0.5, false},
		{3000, 2, true}, {1999, 2, false}, // out of range: all
	} {
		if got := busy(c.rate, c.share); got != c.want {
			t.Errorf("busy(%v, %.3f) = %v, want %v", c.rate, c.share, got, c.want)
		}
	}
}
