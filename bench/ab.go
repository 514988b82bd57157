package bench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// RelayBinary describes a relay binary a run used (Report.RelayBin,
// Report.RelayBinB), so that an A/B report says which build was which.
type RelayBinary struct {
	// Path is the binary's absolute path.
	Path string `json:"path"`
	// Version is what `outbox-relay version` printed (the version, the
	// module and the VCS revision recorded in the binary), or why it
	// could not be read.
	Version string `json:"version"`
	// SHA256 is the binary's SHA-256, hex ("" if it could not be read).
	SHA256 string `json:"sha256,omitempty"`
}

// CheckRelayBin returns an error unless path names an existing regular
// file that is executable (by someone: its mode has an x bit).
func CheckRelayBin(path string) error {
	if path == "" {
		return errors.New("empty path")
	}
	fi, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s does not exist", path)
		}
		return err
	}
	switch {
	case fi.IsDir():
		return fmt.Errorf("%s is a directory, not an outbox-relay binary", path)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file", path)
	case fi.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("%s is not executable (mode %s)", path, fi.Mode().Perm())
	}
	return nil
}

// DescribeRelayBin returns path's absolute path, `path version`'s output
// (its lines joined with "; ") and its SHA-256. It never fails: what
// cannot be read says so in Version, or stays empty.
func DescribeRelayBin(ctx context.Context, path string) RelayBinary {
	b := RelayBinary{Path: path}
	if abs, err := filepath.Abs(path); err == nil {
		b.Path = abs
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, b.Path, "version").Output()
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			lines = append(lines, l)
		}
	}
	b.Version = strings.Join(lines, "; ")
	if err != nil {
		b.Version = strings.TrimSpace("unavailable (" + err.Error() + ") " + b.Version)
	}
	if f, err := os.Open(b.Path); err == nil {
		h := sha256.New()
		if _, err := io.Copy(h, f); err == nil {
			b.SHA256 = hex.EncodeToString(h.Sum(nil))
		}
		f.Close()
	}
	return b
}

// ABRow compares one figure of the notify-proc runs (A: Env.RelayBin)
// with the notify-proc-b runs (B: Env.RelayBinB) at one rate: the median
// and the range (max - min) over each mode's successful runs. For every
// figure lower is better.
type ABRow struct {
	Rate   float64 `json:"rate"`
	Figure string  `json:"figure"`
	// RunsA, RunsB are the runs with the figure.
	RunsA int `json:"runs_a"`
	RunsB int `json:"runs_b"`
	// MedianA, MedianB, RangeA, RangeB: the median and max - min of each
	// mode's runs.
	MedianA float64 `json:"median_a"`
	MedianB float64 `json:"median_b"`
	RangeA  float64 `json:"range_a"`
	RangeB  float64 `json:"range_b"`
	// Diff is MedianA - MedianB (positive: A is worse).
	Diff float64 `json:"diff"`
	// Spread is the larger of RangeA and RangeB: how far repeated runs of
	// one binary fell apart.
	Spread float64 `json:"spread"`
	// Verdict is "A worse" or "B worse" when |Diff| > Spread, "within
	// spread" otherwise, and "-" with fewer than two runs of either (no
	// spread to compare with).
	Verdict string `json:"verdict"`
}

// abFigures are the figures CompareAB compares, with their getters.
var abFigures = []struct {
	name string
	get  func(r *Run) (float64, bool)
}{
	{"p50_ms", func(r *Run) (float64, bool) { return r.P50MS, true }},
	{"p99_ms", func(r *Run) (float64, bool) { return r.P99MS, true }},
	{"max_ms", func(r *Run) (float64, bool) { return r.MaxMS, true }},
	{"claims_per_s", func(r *Run) (float64, bool) { return r.ClaimsPerS, true }},
	{"relay_cpu_ms_per_event", costOf(func(c *Cost) *float64 { return c.RelayCPUMSPerEvent })},
	{"relay_db_cpu_ms_per_event", costOf(func(c *Cost) *float64 { return c.RelayDBCPUMSPerEvent })},
	{"relay_xacts_per_event", costOf(func(c *Cost) *float64 { return c.RelayXactsPerEvent })},
}

// costOf returns a getter of the cost figure f picks (none: not
// measured).
func costOf(f func(*Cost) *float64) func(*Run) (float64, bool) {
	return func(r *Run) (float64, bool) {
		if r.Cost == nil {
			return 0, false
		}
		if p := f(r.Cost); p != nil && !math.IsNaN(*p) {
			return *p, true
		}
		return 0, false
	}
}

// CompareAB compares the latency runs of notify-proc (A) and
// notify-proc-b (B), rate by rate (in the order the rates first ran),
// for every figure of abFigures that both have; nil without runs of both.
func CompareAB(runs []Run) []ABRow {
	var rates []float64
	byMode := map[string]map[float64][]*Run{ModeNotifyProc: {}, ModeNotifyProcB: {}}
	for i := range runs {
		r := &runs[i]
		m, ok := byMode[r.Mode]
		if !ok || r.Scenario != ScenarioLatency || r.Latency == nil || r.Error != "" || r.Count == 0 {
			continue
		}
		if !slices.Contains(rates, r.Rate) {
			rates = append(rates, r.Rate)
		}
		m[r.Rate] = append(m[r.Rate], r)
	}
	var out []ABRow
	for _, rate := range rates {
		a, b := byMode[ModeNotifyProc][rate], byMode[ModeNotifyProcB][rate]
		if len(a) == 0 || len(b) == 0 {
			continue
		}
		for _, f := range abFigures {
			va, vb := values(a, f.get), values(b, f.get)
			if len(va) == 0 || len(vb) == 0 {
				continue
			}
			row := ABRow{Rate: rate, Figure: f.name, RunsA: len(va), RunsB: len(vb),
				MedianA: median(va), MedianB: median(vb), RangeA: spanOf(va), RangeB: spanOf(vb)}
			row.Diff = row.MedianA - row.MedianB
			row.Spread = max(row.RangeA, row.RangeB)
			switch {
			case len(va) < 2 || len(vb) < 2:
				row.Verdict = "-"
			case row.Diff > row.Spread:
				row.Verdict = "A worse"
			case -row.Diff > row.Spread:
				row.Verdict = "B worse"
			default:
				row.Verdict = "within spread"
			}
			out = append(out, row)
		}
	}
	return out
}

func values(runs []*Run, get func(*Run) (float64, bool)) []float64 {
	var v []float64
	for _, r := range runs {
		if x, ok := get(r); ok {
			v = append(v, x)
		}
	}
	return v
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func spanOf(v []float64) float64 {
	return slices.Max(v) - slices.Min(v)
}

// writeRelayBins prints which binary A (notify-proc) and B
// (notify-proc-b) were.
func writeRelayBins(w io.Writer, r *Report) {
	for _, x := range []struct {
		name string
		b    *RelayBinary
	}{{"relay A (notify-proc, --relay-bin)", r.RelayBin}, {"relay B (notify-proc-b, --relay-bin-b)", r.RelayBinB}} {
		if x.b != nil {
			sum := x.b.SHA256
			if len(sum) > 12 {
				sum = sum[:12]
			}
			fmt.Fprintf(w, "%s: %s (sha256 %s): %s\n", x.name, x.b.Path, sum, x.b.Version)
		}
	}
	if len(r.RelayArgsB) > 0 {
		fmt.Fprintf(w, "relay B's own flags: %s\n", strings.Join(r.RelayArgsB, " "))
	}
}

// writeAB prints the A/B comparison (CompareAB).
func writeAB(w io.Writer, rows []ABRow) {
	if len(rows) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "A/B (A notify-proc, B notify-proc-b)\trate/s\truns A\truns B\tmedian A\trange A\tmedian B\trange B\tA - B\tspread\tverdict\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%g\t%d\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%+.3f\t%.3f\t%s\t\n", r.Figure, r.Rate, r.RunsA, r.RunsB,
			r.MedianA, r.RangeA, r.MedianB, r.RangeB, r.Diff, r.Spread, r.Verdict)
	}
	tw.Flush()
	fmt.Fprintln(w, "(median and range (max - min) over each binary's runs at the rate; lower is better for every figure; spread: the larger range; verdict: A or B worse when |A - B| > spread)")
	fmt.Fprintln(w)
}
