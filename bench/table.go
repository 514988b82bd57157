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
	case r.BrokerDown != nil:
		return fmt.Sprintf("%s outage=%gs", r.Mode, r.BrokerDown.OutageS)
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
	var lat, drain, writers, down []*Run
	for i := range r.Runs {
		run := &r.Runs[i]
		switch {
		case run.BrokerDown != nil:
			down = append(down, run)
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
		fmt.Fprintln(tw, "drain\tevents\tseconds\tevents/s\treceived\tdup\tclaims\tbench RSS max MiB\tbench peak MiB\trelay RSS max MiB\trelay peak MiB\t")
		for _, run := range drain {
			relayRSS, relayHWM := "-", "-"
			if run.RelayRSSMaxMiB > 0 {
				relayRSS, relayHWM = fmt.Sprintf("%.1f", run.RelayRSSMaxMiB), fmt.Sprintf("%.1f", run.RelayVmHWMMiB)
			}
			claims := fmt.Sprint(run.Claims)
			if run.Mode == ModeNotifyProc {
				claims = "-" // not counted in another process
			}
			fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.0f\t%d\t%d\t%s\t%.1f\t%.1f\t%s\t%s\t%s\n",
				RunLabel(run), run.Events, run.DurationS, run.EventsPerS, run.Received, run.DuplicateReceptions,
				claims, run.RSSMaxMB, run.VmHWMMB, relayRSS, relayHWM, errNote(run))
		}
		tw.Flush()
		fmt.Fprintln(w, "(bench RSS: the whole bench process, with the consumer and the in-process broker; relay RSS: the relay process alone, notify-proc)")
		fmt.Fprintln(w)
	}
	if len(writers) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "writers\twake-ups\tcommits/s\tratio\ttx p50 ms\ttx p99 ms\terrors\trelay claims/s\tnotifications/s\tevents/claim\t")
		for _, run := range writers {
			ratio := ""
			if run.Ratio > 0 {
				ratio = fmt.Sprintf("%.2f", run.Ratio)
			}
			fmt.Fprintf(tw, "%d\t%s\t%.0f\t%s\t%.2f\t%.2f\t%d\t%.1f\t%.1f\t%.0f\t%s\n",
				run.Connections, run.WakeupMode, run.CommitsPerS, ratio, run.TxP50MS, run.TxP99MS, run.FailedCommits,
				run.RelayClaimsPerS, run.RelayNotificationsPerS, run.RelayEventsPerClaim, errNote(run))
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
	if len(down) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "broker-down (relay process)\toutage s\trate/s\twritten in outage\tRSS before MiB\tmax in outage\tmax in recovery\tpeak MiB\trecovery s\tcount\tlost\tdup\t")
		for _, run := range down {
			b := run.BrokerDown
			fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.2f\t%d\t%d\t%d\t%s\n",
				run.Mode, b.OutageS, b.Rate, b.WrittenOutage, b.RSSBeforeMiB, b.RSSMaxOutageMiB, b.RSSMaxRecoveryMiB,
				b.VmHWMMiB, b.RecoveryS, b.Count, b.Lost, b.Duplicates, errNote(run))
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
}

func errNote(r *Run) string {
	switch {
	case r.Error != "":
		return "  error: " + r.Error
	case r.Note != "":
		return "  note: " + r.Note
	}
	return ""
}

func firstWords(s string, n int) string {
	f := strings.Fields(s)
	if len(f) > n {
		f = f[:n]
	}
	return strings.Join(f, " ")
}
