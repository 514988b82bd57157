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
		if r.Mode == ModeWritersOnly && r.WritersWakeup != "" {
			s = fmt.Sprintf("%s(%s)", r.Mode, r.WritersWakeup)
		}
		if r.Scenario == ScenarioLatency && r.WriterKind != "" {
			s = fmt.Sprintf("%s %s", s, r.WriterKind)
		}
		if r.LatencyRelays > 1 {
			s = fmt.Sprintf("%s x%d", s, r.LatencyRelays)
		}
		return s
	case r.Scale != nil && r.Drain != nil:
		return fmt.Sprintf("%s x%d %d aggregates", r.Mode, r.Relays, r.Aggregates)
	case r.Drain != nil:
		return fmt.Sprintf("%s x%d", r.Mode, r.Relays)
	case r.Writers != nil:
		return fmt.Sprintf("%d conns %s", r.Connections, r.WakeupMode)
	case r.BrokerDown != nil:
		return fmt.Sprintf("%s outage=%gs", r.Mode, r.BrokerDown.OutageS)
	}
	return r.Mode
}

// costLabel names a run in the cost table, the goals and the cost plot:
// its scenario, RunLabel and, for latency-type runs, the rate, e.g.
// "latency notify-proc 1000/s".
func costLabel(r *Run) string {
	s := r.Scenario + " " + RunLabel(r)
	if r.Latency != nil && r.Drain == nil {
		s += fmt.Sprintf(" %g/s", r.Rate)
	}
	return s
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
	fmt.Fprintf(w, "postgres: %s (fsync=%s, synchronous_commit=%s, %s); broker: %s\n",
		firstWords(m.Postgres, 2), m.PostgresFsync, m.PostgresSynchronousCommit, m.PostgresSource, m.Broker)
	if len(m.BrokerJVMFlags) > 0 {
		pinned := "not pinned"
		if m.BrokerCPUs != "" {
			pinned = "pinned to CPUs " + m.BrokerCPUs
		}
		fmt.Fprintf(w, "broker JVM (%s): %s\n", pinned, strings.Join(m.BrokerJVMFlags, " "))
	}
	if m.BrokerWarmup != "" {
		fmt.Fprintf(w, "broker warm-up: %s\n", m.BrokerWarmup)
	}
	if m.DBCPUSource != "" {
		fmt.Fprintf(w, "DB CPU: %s\n", m.DBCPUSource)
	}
	writeRelayBins(w, r)
	fmt.Fprintln(w)
	var lat, drain, writers, down, bursts, costs, notify, scale, deployed []*Run
	for i := range r.Runs {
		run := &r.Runs[i]
		if run.Cost != nil && run.Scenario != ScenarioNotifyCost && run.Scenario != ScenarioDeployedIdle {
			costs = append(costs, run)
		}
		switch {
		case run.Scenario == ScenarioNotifyCost:
			notify = append(notify, run)
		case run.Scenario == ScenarioDeployed || run.Scenario == ScenarioDeployedIdle || run.Scenario == ScenarioDeployedRestart:
			deployed = append(deployed, run)
		case run.Scale != nil && run.Drain != nil:
			scale = append(scale, run)
		case run.BrokerDown != nil:
			down = append(down, run)
		case run.Burst != nil:
			bursts = append(bursts, run)
		case run.Scenario == ScenarioBaseline:
			if run.Cost == nil {
				fmt.Fprintf(w, "%s %s: error: %s\n", run.Scenario, run.Mode, run.Error)
			}
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
		fmt.Fprintln(tw, "latency (ms)\trate/s\tcount\tlost\tdup\tmean\tp50\tp90\tp99\tp99.9\tmax\tfloor p50\tfloor p99\tfloor max\tlag p99\tclaims/s\tempty/s\tidle claims/s\t")
		floors := false
		for _, run := range lat {
			floors = floors || run.FloorCount > 0
			fp50, fp99, fmax := floorFigures(run)
			fmt.Fprintf(tw, "%s\t%.0f\t%d\t%d\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t%s\t%s\t%.2f\t%.1f\t%.1f\t%.2f\t%s\n",
				costLabel(run), run.AchievedRate, run.Count, run.Lost, run.Duplicates,
				run.MeanMS, run.P50MS, run.P90MS, run.P99MS, run.P999MS, run.MaxMS, fp50, fp99, fmax, run.LagP99MS,
				run.ClaimsPerS, run.EmptyClaimsPerS, run.IdleClaimsPerS, errNote(run))
		}
		tw.Flush()
		if floors {
			fmt.Fprintln(w, "(floor: the broker's own produce-to-consume latency in the same run, one record per Publish call at floor_rate/s to a topic of its own)")
		}
		fmt.Fprintln(w)
		writeRelayTimings(w, lat)
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
			name := RunLabel(run)
			if run.Scenario != ScenarioDrain {
				name = run.Scenario + " " + name
			}
			fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.0f\t%d\t%d\t%s\t%.1f\t%.1f\t%s\t%s\t%s\n",
				name, run.Events, run.DurationS, run.EventsPerS, run.Received, run.DuplicateReceptions,
				claims, run.RSSMaxMB, run.VmHWMMB, relayRSS, relayHWM, errNote(run))
		}
		tw.Flush()
		fmt.Fprintln(w, "(bench RSS: the whole bench process, with the consumer and the in-process broker; relay RSS: the relay process alone, notify-proc and notify-proc-b)")
		fmt.Fprintln(w)
	}
	if len(scale) > 0 {
		writeScale(w, scale)
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
	if len(notify) > 0 {
		writeNotifyCost(w, notify)
	}
	if len(bursts) > 0 {
		writeBursts(w, bursts)
	}
	if len(costs) > 0 {
		writeCosts(w, costs)
	}
	if len(down) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "broker-down (relay process)\toutage\toutage s\trestart s\trate/s\twritten in outage\tRSS before MiB\tmax in outage\tmax in recovery\tpeak MiB\trecovery s\tcount\tlost\tdup\t")
		for _, run := range down {
			b := run.BrokerDown
			fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.2f\t%.0f\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.2f\t%d\t%d\t%d\t%s\n",
				run.Mode, b.Outage, b.OutageS, b.RestartS, b.Rate, b.WrittenOutage, b.RSSBeforeMiB, b.RSSMaxOutageMiB, b.RSSMaxRecoveryMiB,
				b.VmHWMMiB, b.RecoveryS, b.Count, b.Lost, b.Duplicates, errNote(run))
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
	writeAB(w, CompareAB(r.Runs))
	writeDeployed(w, deployed, EvaluateDeployed(r.Runs))
	writeGoals(w, r.Goals)
}

// writeScale writes the scale runs: events/s of each relay count, the
// ratio to one relay and the cost per event.
func writeScale(w io.Writer, runs []*Run) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scale (relay processes)	aggregates	relays	events	seconds	events/s	ratio to 1	rounds events/s	received	dup	claims	DB CPU ms/ev	DB xact/ev	relay CPU ms/ev	relay peak MiB	")
	for _, run := range runs {
		ratio := "-"
		if run.RatioToOneRelay > 0 {
			ratio = fmt.Sprintf("%.2f", run.RatioToOneRelay)
		}
		dbCPU, xacts, relayCPU := "-", "-", "-"
		if c := run.Cost; c != nil {
			dbCPU, relayCPU = optF(c.DBCPUMSPerEvent, "%.4f"), optF(c.RelayCPUMSPerEvent, "%.4f")
			xacts = fmt.Sprintf("%.4f", c.DBXactsPerEvent)
		}
		rounds := "-"
		if run.Scale != nil && len(run.RoundsEventsPerS) > 0 {
			var parts []string
			for _, v := range run.RoundsEventsPerS {
				parts = append(parts, fmt.Sprintf("%.0f", v))
			}
			rounds = strings.Join(parts, " ")
		}
		fmt.Fprintf(tw, "%s	%d	%d	%d	%.2f	%.0f	%s	%s	%d	%d	%d	%s	%s	%s	%.1f	%s\n",
			run.Scenario, run.Aggregates, run.Relays, run.Events, run.DurationS, run.EventsPerS, ratio, rounds,
			run.Received, run.DuplicateReceptions, run.Claims, dbCPU, xacts, relayCPU, run.RelayVmHWMMiB, errNote(run))
	}
	tw.Flush()
	fmt.Fprintln(w)
}

// writeBursts writes the burst runs: the idle cost, then the bursts.
func writeBursts(w io.Writer, runs []*Run) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "idle cost (relay process)\tidle window s\tDB xact/s\tDB CPU s/10s\trelay CPU s/10s\tWAL B/s\tclaims/s\t")
	for _, run := range runs {
		b := run.Burst
		fmt.Fprintf(tw, "%s\t%.1f\t%.2f\t%s\t%s\t%.0f\t%.2f\t%s\n", run.Mode, b.IdleCostWindowS, b.IdleDBXactsPerS,
			optF(b.IdleDBCPUSPer10S, "%.3f"), optF(b.IdleRelayCPUSPer10S, "%.3f"), b.IdleWALBytesPerS, b.IdleCostClaimsPerS, errNote(run))
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "burst (one transaction)\tevents\tinsert s\tafter idle\tevents/s\tfirst event s\tafter idle\tevents/s\tfirst event s\tratio\treceived\tdup\t")
	for _, run := range runs {
		b := run.Burst
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%gs\t%.0f\t%.3f\t%gs\t%.0f\t%.3f\t%.2f\t%d\t%d\t%s\n", run.Mode, b.BurstEvents, b.InsertS,
			b.IdleS, b.AfterIdleEventsPerS, b.FirstEventS, b.ShortIdleS, b.AfterShortIdleEventsPerS, b.ShortFirstEventS,
			b.BurstRatio, b.BurstReceived, b.BurstDuplicates, errNote(run))
	}
	tw.Flush()
	fmt.Fprintln(w)
}

// writeCosts writes what each run cost the database and the relay, next
// to its latency percentiles.
func writeCosts(w io.Writer, runs []*Run) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "cost\tevents\twindow s\tp50 ms\tp99 ms\tfloor p50\tfloor p99\tclaims/s\tDB xact/s\tDB CPU s\trelay CPU s\tbroker CPU s\tDB CPU ms/ev\trelay DB CPU ms/ev\trelay CPU ms/ev\tbroker CPU ms/ev\tDB xact/ev\trelay xact/ev\tWAL B/ev\trelay WAL B/ev\tckpt\t")
	for _, run := range runs {
		c := run.Cost
		p50, p99, claims, fp50, fp99 := "-", "-", "-", "-", "-"
		switch {
		case run.Latency != nil && run.Count > 0:
			p50, p99 = fmt.Sprintf("%.2f", run.P50MS), fmt.Sprintf("%.2f", run.P99MS)
			claims = fmt.Sprintf("%.1f", run.ClaimsPerS)
			fp50, fp99, _ = floorFigures(run)
		case run.Drain != nil && run.DurationS > 0 && run.Mode != ModeSQLCeiling:
			claims = fmt.Sprintf("%.1f", float64(run.Claims)/run.DurationS)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%s\t%s\t%s\t%s\t%s\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.3f\t%s\t%.0f\t%s\t%d\t%s\n",
			costLabel(run), c.CostEvents, c.CostWindowS, p50, p99, fp50, fp99, claims, c.DBXactsPerS,
			optF(c.DBCPUS, "%.2f"), optF(c.RelayCPUS, "%.2f"), optF(c.BrokerCPUS, "%.2f"), optF(c.DBCPUMSPerEvent, "%.3f"),
			optF(c.RelayDBCPUMSPerEvent, "%.3f"), optF(c.RelayCPUMSPerEvent, "%.3f"), optF(c.BrokerCPUMSPerEvent, "%.3f"), c.DBXactsPerEvent,
			optF(c.RelayXactsPerEvent, "%.3f"), c.WALBytesPerEvent, optF(c.RelayWALBytesPerEvent, "%.0f"), c.Checkpoints, errNote(run))
	}
	tw.Flush()
	fmt.Fprintln(w, "(DB: every PostgreSQL process; relay DB CPU, xact, WAL: per event minus the writers-only baseline at the same load;")
	fmt.Fprintln(w, " relay CPU: the relay process, notify-proc, notify-proc-b and notify-every-tx only; broker CPU: a broker process the bench started, its floor probe's")
	fmt.Fprintln(w, " and consumers' load included; floor: the broker's own latency in the same run; \"-\": not measured. See bench/README.md.)")
	fmt.Fprintln(w)
}

// floorFigures formats a latency run's floor p50, p99 and max ("-"
// without a floor probe).
func floorFigures(r *Run) (p50, p99, maxMS string) {
	if r.Latency == nil || r.FloorCount == 0 {
		return "-", "-", "-"
	}
	return fmt.Sprintf("%.2f", r.FloorP50MS), fmt.Sprintf("%.2f", r.FloorP99MS), fmt.Sprintf("%.2f", r.FloorMaxMS)
}

// writeRelayTimings writes where the relay processes' time went in the
// latency runs that scraped it (notify-proc, notify-proc-b,
// notify-every-tx).
func writeRelayTimings(w io.Writer, runs []*Run) {
	var with []*Run
	for _, r := range runs {
		if r.RelayTimings != nil {
			with = append(with, r)
		}
	}
	if len(with) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "relay process (its /metrics)\tclaims\tclaim ms\twith rows\tclaim rows ms\tevents/claim\tmarks\tmark ms\tproduces\tproduce ms\tproduce > 5 ms\tpublish latency ms\t")
	for _, r := range with {
		t := r.RelayTimings
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%d\t%.2f\t%.2f\t%d\t%.2f\t%d\t%.2f\t%.1f%%\t%.2f\t\n", costLabel(r), t.Claims, t.ClaimMeanMS,
			t.ClaimsWithRows, t.ClaimRowsMeanMS, t.EventsPerClaim, t.Marks, t.MarkMeanMS, t.Produces, t.ProduceMeanMS, 100*t.ProduceOver5MS, t.PublishLatencyMeanMS)
	}
	tw.Flush()
	fmt.Fprintln(w, "(means over the send phase: outbox_claim_duration_seconds, outbox_claim_batch_size, outbox_mark_duration_seconds,")
	fmt.Fprintln(w, " outbox_kafka_produce_duration_seconds, outbox_publish_latency_seconds)")
	fmt.Fprintln(w)
}

// optF formats an optional figure, "-" when absent.
func optF(v *float64, format string) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf(format, *v)
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

// writeNotifyCost writes the notify-cost runs: per commit rate and writer
// wake-up mode, what the writers reached and what each commit cost the
// database, against the run without wake-ups at the same rate.
func writeNotifyCost(w io.Writer, runs []*Run) {
	none := map[float64]*Run{}
	for _, run := range runs {
		if run.Latency != nil && run.WritersWakeup == "none" && run.Error == "" {
			none[run.Rate] = run
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "wake-up cost (writers only)	rate/s	writers	commits/s	vs none	commit p50 ms	p99 ms	DB CPU ms/commit	vs none ms	DB xact/commit	WAL B/commit	notifications	")
	for _, run := range runs {
		if run.Latency == nil || run.Cost == nil {
			fmt.Fprintf(w, "%s %s: error: %s\n", run.Scenario, run.Mode, run.Error)
			continue
		}
		c := run.Cost
		ratio, dCPU := "-", "-"
		if b := none[run.Rate]; b != nil && b != run {
			if b.AchievedRate > 0 {
				ratio = fmt.Sprintf("%.2f", run.AchievedRate/b.AchievedRate)
			}
			if c.DBCPUMSPerEvent != nil && b.Cost != nil && b.Cost.DBCPUMSPerEvent != nil {
				dCPU = fmt.Sprintf("%+.3f", *c.DBCPUMSPerEvent-*b.Cost.DBCPUMSPerEvent)
			}
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%d\t%.0f\t%s\t%.2f\t%.2f\t%s\t%s\t%.3f\t%.0f\t%d\t%s\n",
			run.WritersWakeup, run.Rate, run.WriterCount, run.AchievedRate, ratio, run.CommitP50MS, run.CommitP99MS,
			optF(c.DBCPUMSPerEvent, "%.3f"), dCPU, c.DBXactsPerEvent, c.WALBytesPerEvent, run.Notifications, errNote(run))
	}
	tw.Flush()
	fmt.Fprintln(w, "(one event per commit; for after-commit the commit time includes the bench's pg_notify after the commit; a LISTEN session reads every notification, and each read is a transaction of its own)")
	fmt.Fprintln(w)
}
