package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// RunLabel names a run in tables and plot legends, e.g. "poll(500ms)" or
// "notify x2".
func RunLabel(r *Run) string {
	switch {
	case r.Latency != nil:
		s := r.Mode
		if r.Mode == ModePoll || r.Mode == ModeNaive {
			s = fmt.Sprintf("%s(%s)", r.Mode, fmtMS(r.PollIntervalMS))
		}
		if r.Scenario == ScenarioSweep {
			s = fmt.Sprintf("%s poll=%s lease=%s", r.Mode, fmtMS(r.PollIntervalMS), fmtMS(r.LeaseMS))
		}
		return s
	case r.Drain != nil:
		return fmt.Sprintf("%s x%d", r.Mode, r.Relays)
	case r.Writers != nil:
		return fmt.Sprintf("%d conns %s", r.Connections, r.WakeupMode)
	}
	return r.Mode
}

// fmtMS formats a millisecond figure as a Go-style duration ("500ms", "30s").
func fmtMS(v float64) string {
	switch {
	case v >= 1000 && v == float64(int64(v/1000))*1000:
		return fmt.Sprintf("%ds", int64(v/1000))
	case v == float64(int64(v)):
		return fmt.Sprintf("%dms", int64(v))
	}
	return fmt.Sprintf("%gms", v)
}

// WriteTable writes the report as plain-text tables, one per scenario.
func (r *Report) WriteTable(w io.Writer) {
	m := r.Machine
	fmt.Fprintf(w, "machine: %s, %d cores, %d MiB, %s, kernel %s\n", m.CPU, m.Cores, m.MemoryMB, m.GoVersion, m.Kernel)
	fmt.Fprintf(w, "postgres: %s (fsync=%s, synchronous_commit=%s, %s); broker: %s\n\n",
		firstWords(m.Postgres, 2), m.PostgresFsync, m.PostgresSynchronousCommit, m.PostgresSource, m.Broker)
	var lat, drain, writers []*Run
	for i := range r.Runs {
		run := &r.Runs[i]
		switch {
		case run.Latency != nil:
			lat = append(lat, run)
		case run.Drain != nil:
			drain = append(drain, run)
		case run.Writers != nil:
			writers = append(writers, run)
		default:
			fmt.Fprintf(w, "%s %s: error: %s\n", run.Scenario, run.Mode, run.Error)
		}
	}
	if len(lat) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "latency (ms)\trate/s\tcount\tlost\tdup\tmean\tp50\tp90\tp99\tp99.9\tmax\tlag p99\tclaims/s\tempty/s\tidle claims/s\t")
		for _, run := range lat {
			fmt.Fprintf(tw, "%s %s\t%.0f\t%d\t%d\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.1f\t%.1f\t%.2f\t%s\n",
				run.Scenario, RunLabel(run), run.AchievedRate, run.Count, run.Lost, run.Duplicates,
				run.MeanMS, run.P50MS, run.P90MS, run.P99MS, run.P999MS, run.MaxMS, run.LagP99MS,
				run.ClaimsPerS, run.EmptyClaimsPerS, run.IdleClaimsPerS, errNote(run))
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
	if len(drain) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "drain\tevents\tseconds\tevents/s\treceived\tdup\tclaims\tRSS max MiB\tpeak RSS MiB\t")
		for _, run := range drain {
			fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.0f\t%d\t%d\t%d\t%.1f\t%.1f\t%s\n",
				RunLabel(run), run.Events, run.DurationS, run.EventsPerS, run.Received, run.DuplicateReceptions,
				run.Claims, run.RSSMaxMB, run.VmHWMMB, errNote(run))
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
	if len(writers) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "writers\twake-ups\tcommits/s\tratio\ttx p50 ms\ttx p99 ms\terrors\t")
		for _, run := range writers {
			ratio := ""
			if run.Ratio > 0 {
				ratio = fmt.Sprintf("%.2f", run.Ratio)
			}
			fmt.Fprintf(tw, "%d\t%s\t%.0f\t%s\t%.2f\t%.2f\t%d\t%s\n",
				run.Connections, run.WakeupMode, run.CommitsPerS, ratio, run.TxP50MS, run.TxP99MS, run.FailedCommits, errNote(run))
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
}

func errNote(r *Run) string {
	if r.Error == "" {
		return ""
	}
	return "  error: " + r.Error
}

func firstWords(s string, n int) string {
	f := strings.Fields(s)
	if len(f) > n {
		f = f[:n]
	}
	return strings.Join(f, " ")
}
