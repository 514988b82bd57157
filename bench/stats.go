package bench

import (
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Histogram bounds: values are recorded in microseconds, from 1µs to 10
// minutes, with 3 significant digits (0.1% resolution).
const (
	histMinUS  = 1
	histMaxUS  = int64(10 * time.Minute / time.Microsecond)
	histDigits = 3
)

// NewHistogram returns an HdrHistogram for durations recorded with
// RecordDuration (microsecond units, 1µs to 10 minutes, 3 significant
// digits).
func NewHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(histMinUS, histMaxUS, histDigits)
}

// RecordDuration records d in h in microseconds, clamped to the histogram's
// range (a negative d, possible only through clock-reading races, counts
// as the minimum).
func RecordDuration(h *hdrhistogram.Histogram, d time.Duration) {
	us := d.Microseconds()
	if us < histMinUS {
		us = histMinUS
	}
	if us > histMaxUS {
		us = histMaxUS
	}
	_ = h.RecordValue(us)
}

// Summary is the distribution of a latency histogram, in milliseconds.
type Summary struct {
	Count                               int64
	Mean, P50, P90, P99, P999, Max, Min float64
}

// Summarize returns h's count, mean, percentiles and max in milliseconds
// (h holds microseconds, see RecordDuration). An empty histogram gives all
// zeros.
func Summarize(h *hdrhistogram.Histogram) Summary {
	if h == nil || h.TotalCount() == 0 {
		return Summary{}
	}
	ms := func(us int64) float64 { return float64(us) / 1000 }
	return Summary{
		Count: h.TotalCount(),
		Mean:  h.Mean() / 1000,
		P50:   ms(h.ValueAtQuantile(50)),
		P90:   ms(h.ValueAtQuantile(90)),
		P99:   ms(h.ValueAtQuantile(99)),
		P999:  ms(h.ValueAtQuantile(99.9)),
		Max:   ms(h.Max()),
		Min:   ms(h.Min()),
	}
}

// CDFPoint is one point of a cumulative distribution: the fraction of
// values at or below LatencyMS.
type CDFPoint struct {
	LatencyMS float64 `json:"latency_ms"`
	Fraction  float64 `json:"fraction"`
}

// CDF returns h's cumulative distribution (microsecond histogram) as at
// most about maxPoints points in milliseconds, ascending, ending at
// fraction 1.
func CDF(h *hdrhistogram.Histogram, maxPoints int) []CDFPoint {
	total := h.TotalCount()
	if total == 0 {
		return nil
	}
	var pts []CDFPoint
	var cum int64
	for _, b := range h.Distribution() {
		if b.Count == 0 {
			continue
		}
		cum += b.Count
		pts = append(pts, CDFPoint{LatencyMS: float64(b.To) / 1000, Fraction: float64(cum) / float64(total)})
	}
	if maxPoints > 1 && len(pts) > maxPoints {
		step := float64(len(pts)-1) / float64(maxPoints-1)
		out := make([]CDFPoint, 0, maxPoints)
		for i := 0; i < maxPoints; i++ {
			out = append(out, pts[int(float64(i)*step+0.5)])
		}
		out[len(out)-1] = pts[len(pts)-1]
		pts = out
	}
	return pts
}
