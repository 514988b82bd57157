package bench

import (
	"cmp"
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
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
		p.Legend.Add(fmt.Sprintf("%s  p50 %.2f  p99 %.2f ms", strings.TrimPrefix(costLabel(run), run.Scenario+" "), run.P50MS, run.P99MS), l)
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

// costPoint is one run on the cost plot.
type costPoint struct {
	label    string
	rate     float64 // events/s
	x        float64 // DB CPU per event, ms
	plotX    float64 // x, at least minCostX (the log axis)
	p50, p99 float64 // latency, ms
}

// minCostX is the left edge of the cost plot's log-scaled DB CPU axis, in
// ms per event: a relay share at or below it (noise can make a small one
// negative) is drawn there.
const minCostX = 0.001

// costPoints returns the latency and sweep runs with a measured cost: x
// is the relay's DB CPU per event (minus the writers-only baseline) when
// every such run has it, else the whole database's per event (relay is
// then false).
func (r *Report) costPoints() (pts []costPoint, relay bool) {
	var runs []*Run
	relay = true
	for i := range r.Runs {
		run := &r.Runs[i]
		if run.Latency == nil || run.Cost == nil || run.Count == 0 || run.DBCPUMSPerEvent == nil ||
			(run.Scenario != ScenarioLatency && run.Scenario != ScenarioSweep) {
			continue
		}
		runs = append(runs, run)
		if run.RelayDBCPUMSPerEvent == nil {
			relay = false
		}
	}
	for _, run := range runs {
		x := *run.DBCPUMSPerEvent
		if relay {
			x = *run.RelayDBCPUMSPerEvent
		}
		pts = append(pts, costPoint{label: costLabel(run), rate: run.Rate, x: x, plotX: math.Max(x, minCostX), p50: math.Max(run.P50MS, minPlotMS), p99: math.Max(run.P99MS, minPlotMS)})
	}
	return pts, relay
}

// paretoP99 returns the points no other point beats on both DB CPU per
// event and p99 (the frontier), by ascending cost.
func paretoP99(pts []costPoint) plotter.XYs {
	sorted := slices.Clone(pts)
	slices.SortFunc(sorted, func(a, b costPoint) int { return cmp.Compare(a.x, b.x) })
	var out plotter.XYs
	best := math.Inf(1)
	for _, p := range sorted {
		if p.p99 < best {
			best = p.p99
			out = append(out, plotter.XY{X: p.plotX, Y: p.p99})
		}
	}
	return out
}

// WriteCostPlot draws latency percentiles (p50 and p99, log scale)
// against DB CPU per event for every latency and sweep run with a
// measured cost, one point pair per mode, poll interval and rate, with the
// p99 frontier of each rate (the runs no other run at that rate beats on
// both cost and p99): the trade a user chooses from. The format follows
// file's extension as in WritePlot.
func (r *Report) WriteCostPlot(file string) error {
	ext := strings.ToLower(strings.TrimPrefix(filepath.Ext(file), "."))
	switch ext {
	case "png", "svg", "pdf", "eps", "jpg", "jpeg", "tif", "tiff":
	default:
		return fmt.Errorf("bench: plot %s: unknown format %q (use .png or .svg)", file, ext)
	}
	pts, relay := r.costPoints()
	p := plot.New()
	p.Title.Text = "Latency against what the relay costs the database"
	p.X.Label.Text = fmt.Sprintf("relay's DB CPU per event (ms, log scale; run minus writers-only baseline; ≤ %g drawn at %g)", minCostX, minCostX)
	if !relay {
		p.X.Label.Text = "DB CPU per event (ms, log scale; all PostgreSQL processes, writers included)"
	}
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Label.Text = "latency (ms, log scale): ● p50 ▲ p99"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Add(plotter.NewGrid())
	if len(pts) == 0 {
		l, _ := plotter.NewLine(plotter.XYs{{X: 0.01, Y: 1}, {X: 1, Y: 10}})
		l.Color = color.Transparent
		p.Add(l)
	}
	ymin, ymax := math.Inf(1), 0.0
	for i, pt := range pts {
		c := plotutil.Color(i)
		seg, err := plotter.NewLine(plotter.XYs{{X: pt.plotX, Y: pt.p50}, {X: pt.plotX, Y: pt.p99}})
		if err != nil {
			return fmt.Errorf("bench: cost plot: %w", err)
		}
		seg.Color, seg.Width = c, vg.Points(1)
		s50, err := plotter.NewScatter(plotter.XYs{{X: pt.plotX, Y: pt.p50}})
		if err != nil {
			return fmt.Errorf("bench: cost plot: %w", err)
		}
		s50.GlyphStyle = draw.GlyphStyle{Color: c, Radius: vg.Points(3), Shape: draw.CircleGlyph{}}
		s99, err := plotter.NewScatter(plotter.XYs{{X: pt.plotX, Y: pt.p99}})
		if err != nil {
			return fmt.Errorf("bench: cost plot: %w", err)
		}
		s99.GlyphStyle = draw.GlyphStyle{Color: c, Radius: vg.Points(3.5), Shape: draw.PyramidGlyph{}}
		p.Add(seg, s50, s99)
		p.Legend.Add(fmt.Sprintf("%s  %.3f ms/ev  p50 %.2f  p99 %.2f ms", pt.label, pt.x, pt.p50, pt.p99), s99)
		ymin, ymax = math.Min(ymin, pt.p50), math.Max(ymax, pt.p99)
	}
	var rates []float64
	for _, pt := range pts {
		if !slices.Contains(rates, pt.rate) {
			rates = append(rates, pt.rate)
		}
	}
	for i, rate := range rates {
		var group []costPoint
		for _, pt := range pts {
			if pt.rate == rate {
				group = append(group, pt)
			}
		}
		front := paretoP99(group)
		if len(front) < 2 {
			continue
		}
		l, err := plotter.NewLine(front)
		if err != nil {
			return fmt.Errorf("bench: cost plot: %w", err)
		}
		l.Color, l.Dashes, l.Width = color.Gray{Y: uint8(90 + 40*(i%3))}, []vg.Length{vg.Points(4), vg.Points(3)}, vg.Points(1)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("p99 frontier at %g/s", rate), l)
	}
	if len(pts) > 0 {
		// Just beyond the data: gonum pads the data area for glyphs as
		// if the outermost ones sat on the axis ends.
		p.Y.Min, p.Y.Max = ymin/1.5, ymax*1.5
		xmin, xmax := math.Inf(1), math.Inf(-1)
		for _, pt := range pts {
			xmin, xmax = math.Min(xmin, pt.plotX), math.Max(xmax, pt.plotX)
		}
		p.X.Min, p.X.Max = xmin/1.5, xmax*1.5
		if p.X.Max < p.X.Min*10 {
			p.X.Min, p.X.Max = p.X.Min/3, p.X.Max*3
		}
	}
	p.Legend.Top = true
	p.Legend.Left = false
	p.Legend.XOffs = -2 * vg.Millimeter
	p.Legend.YOffs = -2 * vg.Millimeter
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	if err := p.Save(24*vg.Centimeter, 15*vg.Centimeter, file); err != nil {
		return fmt.Errorf("bench: cost plot: %w", err)
	}
	return nil
}
