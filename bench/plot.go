package bench

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// minPlotMS is the left edge of the log-scaled latency axis, in ms.
const minPlotMS = 0.01

// WritePlot draws the latency distribution (CDF, log-scaled latency axis)
// of every latency-scenario run in the report into file; the format
// follows its extension (.png or .svg; .pdf and .eps also work).
func (r *Report) WritePlot(file string) error {
	ext := strings.ToLower(strings.TrimPrefix(filepath.Ext(file), "."))
	switch ext {
	case "png", "svg", "pdf", "eps", "jpg", "jpeg", "tif", "tiff":
	default:
		return fmt.Errorf("bench: plot %s: unknown format %q (use .png or .svg)", file, ext)
	}
	p := plot.New()
	p.Title.Text = "Commit-to-publish latency (CDF)"
	p.X.Label.Text = "latency (ms, log scale)"
	p.Y.Label.Text = "fraction of events ≤ latency"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = 2 * vg.Millimeter
	p.Legend.YOffs = -2 * vg.Millimeter
	p.Add(plotter.NewGrid())
	xmin, xmax := math.Inf(1), 0.0
	i := 0
	for k := range r.Runs {
		run := &r.Runs[k]
		if run.Latency == nil || run.Scenario != ScenarioLatency || len(run.CDF) == 0 {
			continue
		}
		pts := make(plotter.XYs, 0, len(run.CDF)+1)
		first := math.Max(run.CDF[0].LatencyMS, minPlotMS)
		pts = append(pts, plotter.XY{X: first, Y: 0})
		for _, c := range run.CDF {
			x := math.Max(c.LatencyMS, minPlotMS)
			pts = append(pts, plotter.XY{X: x, Y: c.Fraction})
			xmax = math.Max(xmax, x)
		}
		xmin = math.Min(xmin, first)
		l, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("bench: plot: %w", err)
		}
		l.Color = plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i / len(plotutil.DefaultColors))
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s  p50 %.2f  p99 %.2f ms", RunLabel(run), run.P50MS, run.P99MS), l)
		i++
	}
	if i == 0 {
		// Nothing to draw: an empty, labelled chart rather than an error.
		pts := plotter.XYs{{X: 1, Y: 0}, {X: 10, Y: 0}}
		l, _ := plotter.NewLine(pts)
		l.Color = color.Transparent
		p.Add(l)
		xmin, xmax = 1, 10
	}
	p.X.Min = math.Pow(10, math.Floor(math.Log10(xmin)))
	p.X.Max = math.Pow(10, math.Ceil(math.Log10(xmax)))
	if p.X.Max <= p.X.Min {
		p.X.Max = p.X.Min * 10
	}
	if err := p.Save(22*vg.Centimeter, 13*vg.Centimeter, file); err != nil {
		return fmt.Errorf("bench: plot: %w", err)
	}
	return nil
}
