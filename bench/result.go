package bench

import (
	"encoding/json"
	"os"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Scenario names, the "scenario" key of a Run.
const (
	ScenarioLatency = "latency"
	ScenarioDrain   = "drain"
	ScenarioWriters = "writers"
	ScenarioSweep   = "sweep"
	// ScenarioBrokerDown: the broker refuses connections for a while
	// as writers go on; the relay (a subprocess) must stay bounded in
	// memory and lose nothing.
	ScenarioBrokerDown = "broker-down"
	// ScenarioBaseline is a writers-only run (ModeWritersOnly) at the load
	// of latency runs, run by the suite before them: what the writers
	// alone cost the database.
	ScenarioBaseline = "baseline"
	// ScenarioBurst: the idle cost of a relay process over a long idle
	// period, then one large transaction of events (a burst) drained
	// after that idle period and again after a short one.
	ScenarioBurst = "burst"
	// ScenarioBacklog is the drain of a large preloaded backlog
	// (INSERT ... SELECT FROM generate_series) by one relay process.
	ScenarioBacklog = "backlog"
	// ScenarioLargePayloads is the drain of a backlog of large payloads
	// (by default 2,000 of 900 KB) by one relay process with its
	// defaults: the relay's peak RSS, which its claims' byte bound
	// (--max-batch-bytes) keeps under 256 MiB.
	ScenarioLargePayloads = "large-payloads"
)

// Mode names, the "mode" key of a Run.
const (
	ModeNotify     = "notify"
	ModePoll       = "poll"
	ModeNaive      = "naive"
	ModeFloor      = "floor"
	ModeSQLCeiling = "sql-ceiling"
	// ModeNotifyProc is the notify relay as a child process (the
	// cmd/outbox-relay binary, `run`), so that the relay's own RSS and CPU
	// time are measured apart from the bench's consumer and broker.
	ModeNotifyProc = "notify-proc"
	// ModeNotifyProcB is notify-proc with a second relay binary
	// (Env.RelayBinB): the same defaults, flags, cost accounting and floor
	// probe, so that two builds of the relay (after and before a change)
	// can be measured side by side in one run, interleaved with
	// SuiteConfig.LatencyRounds.
	ModeNotifyProcB = "notify-proc-b"
	// ModeNotifyEveryTx is the simple design beside notify-proc: the
	// relay process with its claim window off (--claim-window negative:
	// no lingering, no busy schedule; it claims on a notification, the
	// fallback poll or a full batch) and writers that notify in every
	// transaction (outbox.WakeupEveryTx).
	ModeNotifyEveryTx = "notify-every-tx"
	// ModeWritersOnly is the latency scenario's writers with no relay: the
	// baseline that the relay's share of the cost figures subtracts.
	ModeWritersOnly = "writers-only"
)

// Report is the whole output: the machine and every run, in order.
type Report struct {
	Machine Machine `json:"machine"`
	// Command is the command line that produced the report.
	Command string `json:"command,omitempty"`
	// Started is when the suite started (UTC).
	Started time.Time `json:"started"`
	// ElapsedS is the suite's wall time in seconds.
	ElapsedS float64 `json:"elapsed_s"`
	Runs     []Run   `json:"runs"`
	// Goals are the relay's targets checked against Runs (EvaluateGoals).
	Goals []Goal `json:"goals,omitempty"`
	// RelayBin and RelayBinB are the relay binaries of the relay-process
	// modes (RelayBinB: notify-proc-b's), when they ran; AB compares the
	// notify-proc runs with the notify-proc-b runs (CompareAB).
	RelayBin  *RelayBinary `json:"relay_bin,omitempty"`
	RelayBinB *RelayBinary `json:"relay_bin_b,omitempty"`
	// RelayArgsB are the flags B's relays ran with besides A's
	// (Env.RelayArgsB: a value format and its registry).
	RelayArgsB []string `json:"relay_args_b,omitempty"`
	AB         []ABRow  `json:"ab,omitempty"`
	// Deployed is the deployed scenario's verdicts (EvaluateDeployed):
	// 3 relays against 1, idle, and the rolling restart, each with its
	// goal.
	Deployed []DeployedCheck `json:"deployed,omitempty"`
}

// Run is one measurement. Scenario and Mode are always set; exactly one of
// Latency (scenarios latency and sweep), Drain or Writers is, and its keys
// appear at the top level of the run's JSON object.
type Run struct {
	Scenario string `json:"scenario"`
	Mode     string `json:"mode"`
	// DurationS is how long the measured phase took, in seconds.
	DurationS float64 `json:"duration_s"`
	// Error is set when the run failed; its figures are then partial.
	Error string `json:"error,omitempty"`
	// Note explains a skipped run (e.g. broker-down with external
	// brokers).
	Note string `json:"note,omitempty"`
	*Latency
	*Drain
	*Writers
	// BrokerDown is set for the broker-down scenario. Its keys (count,
	// lost, ...) would clash with Latency's under encoding/json's
	// embedding rules, so MarshalJSON adds them to the top level.
	BrokerDown *BrokerDown `json:"-"`
	// Burst is set for the burst scenario (idle cost and burst drains).
	*Burst
	// Scale is set, with Drain, for the scale scenario's runs.
	*Scale
	// Cost is what the run cost the database and the relay (latency,
	// sweep, baseline, drain, backlog and burst runs); nil when not
	// measured.
	*Cost

	// hist is the latency histogram (microseconds), for the plot.
	hist *hdrhistogram.Histogram
}

// Histogram returns the run's latency histogram in microseconds, or nil.
func (r *Run) Histogram() *hdrhistogram.Histogram { return r.hist }

// Latency is the result of a latency or sweep run. Times are milliseconds.
type Latency struct {
	// PollIntervalMS is the relay's poll interval (the fallback poll for
	// notify), in ms; 0 for floor.
	PollIntervalMS float64 `json:"poll_interval_ms"`
	// LeaseMS is the lease, in ms; 0 for naive and floor.
	LeaseMS float64 `json:"lease_ms"`
	// RelayDefaults is true when the relay process ran with its own
	// defaults (notify-proc with RelayConfig.ProcDefaults): poll interval,
	// lease, batch size, linger and retention; PollIntervalMS and LeaseMS
	// are then the relay's defaults.
	RelayDefaults bool `json:"relay_defaults,omitempty"`
	// LatencyRelays is the number of relays on the table when more than
	// one (LatencyConfig.Relays); omitted for one.
	LatencyRelays int `json:"latency_relays,omitempty"`
	// WritersWakeup is the writers' wake-up mode of a writers-only
	// (baseline) run.
	WritersWakeup string `json:"writers_wakeup,omitempty"`
	// WriterKind is "plain-sql" when the writers were plain SQL with a
	// pg_notify in every transaction (LatencyConfig.Writer); omitted for
	// outbox.Writer.
	WriterKind string `json:"writer_kind,omitempty"`
	// Round is the run's round in an interleaved scenario (deployed:
	// the 1-relay and 3-relay runs of one round form a pair); omitted
	// outside one.
	Round int `json:"round,omitempty"`
	// OrderViolations (LatencyConfig.CheckOrder) counts pairs of events
	// of one aggregate, the second's transaction begun after the first's
	// COMMIT returned, that were received in the other order or on
	// different partitions (first receptions); omitted when not checked.
	OrderViolations *int64 `json:"order_violations,omitempty"`
	// Restarts are the relay restarts of a rolling-restart run
	// (LatencyConfig.RollingRestart), in order.
	Restarts []Restart `json:"restarts,omitempty"`
	// Rate is the target arrival rate, events/s.
	Rate float64 `json:"rate"`
	// WriterCount is the number of writer goroutines (one connection each).
	WriterCount int `json:"writers"`
	// EventsPerTx is the number of events per transaction.
	EventsPerTx int `json:"events_per_tx"`
	// Count is how many committed events were received at least once.
	Count int64 `json:"count"`
	// Committed is how many events were committed.
	Committed int64 `json:"committed"`
	// Lost is committed but not received within the grace period.
	Lost int64 `json:"lost"`
	// Duplicates counts receptions beyond the first of an event.
	Duplicates int64 `json:"duplicates"`
	// Errors counts failed transactions (their events are not counted).
	Errors int64 `json:"errors"`
	// Commit-to-receive latency, in ms.
	MeanMS float64 `json:"mean_ms"`
	P50MS  float64 `json:"p50_ms"`
	P90MS  float64 `json:"p90_ms"`
	P99MS  float64 `json:"p99_ms"`
	P999MS float64 `json:"p999_ms"`
	MaxMS  float64 `json:"max_ms"`
	// AchievedRate is committed events per second over the send phase.
	AchievedRate float64 `json:"achieved_rate"`
	// Schedule lag: how late transactions began against their intended
	// send time (open-loop schedule), in ms. Large values mean the writers
	// (or the database's commits) could not keep up with Rate.
	LagP50MS float64 `json:"schedule_lag_p50_ms"`
	LagP99MS float64 `json:"schedule_lag_p99_ms"`
	LagMaxMS float64 `json:"schedule_lag_max_ms"`
	// Commit time of one transaction (BEGIN to COMMIT return), in ms.
	CommitP50MS float64 `json:"commit_p50_ms"`
	CommitP99MS float64 `json:"commit_p99_ms"`
	// Database load of the relay(s) during the send phase: claim
	// statements per second and those that found no row.
	ClaimsPerS      float64 `json:"claims_per_s"`
	EmptyClaimsPerS float64 `json:"empty_claims_per_s"`
	// IdleClaimsPerS is the claim rate with no traffic, measured over
	// IdleWindowS seconds after the warm-up, before the measured events.
	IdleClaimsPerS float64 `json:"idle_claims_per_s"`
	IdleWindowS    float64 `json:"idle_window_s"`
	// Notifications is how many notifications the run's LISTEN session
	// received (writers-only runs with LatencyConfig.Listen).
	Notifications int64 `json:"notifications,omitempty"`
	// The broker's own floor, measured in the same run while the writers
	// ran (LatencyConfig.FloorProbeRate): one record per Publish call of a
	// produce.Publisher of its own (acks=all) to a topic of its own at
	// FloorRate records/s, from the call to a franz-go consumer's receipt,
	// in ms; FloorCount records received, FloorLost not received within
	// the grace period. Absent when the probe did not run.
	FloorRate  float64 `json:"floor_rate,omitempty"`
	FloorCount int64   `json:"floor_count,omitempty"`
	FloorLost  int64   `json:"floor_lost,omitempty"`
	FloorP50MS float64 `json:"floor_p50_ms,omitempty"`
	FloorP99MS float64 `json:"floor_p99_ms,omitempty"`
	FloorMaxMS float64 `json:"floor_max_ms,omitempty"`
	// RelayTimings is where a relay process's time went during the send
	// phase, from its /metrics (notify-proc only).
	RelayTimings *RelayTimings `json:"relay_timings,omitempty"`
	// Relay wake-ups during the send phase by cause.
	WakeNotify  int64 `json:"wake_notify"`
	WakePoll    int64 `json:"wake_poll"`
	WakeWindow  int64 `json:"wake_window"`
	WakeBacklog int64 `json:"wake_backlog"`
	// CDF is the latency distribution (fraction at or below latency_ms),
	// thinned to about 200 points.
	CDF []CDFPoint `json:"cdf,omitempty"`
}

// RelayTimings are a relay process's own histograms over a latency run's
// send phase (the difference of two scrapes of its /metrics): how many
// claims, marks and produce requests it made and how long they took on
// average, in ms. With claim, publish and mark in sequence, an event waits
// for the claim that leases it, its produce request and the consumer's
// fetch; the mark delays the next claim.
type RelayTimings struct {
	// Claims and ClaimMeanMS: outbox_claim_duration_seconds, every
	// result (rows, empty, error); ClaimsWithRows and ClaimRowsMeanMS
	// those that leased events; EventsPerClaim: outbox_claim_batch_size's
	// mean.
	Claims          int64   `json:"claims"`
	ClaimMeanMS     float64 `json:"claim_mean_ms"`
	ClaimsWithRows  int64   `json:"claims_with_rows"`
	ClaimRowsMeanMS float64 `json:"claim_rows_mean_ms"`
	EventsPerClaim  float64 `json:"events_per_claim"`
	// Marks and MarkMeanMS: outbox_mark_duration_seconds.
	Marks      int64   `json:"marks"`
	MarkMeanMS float64 `json:"mark_mean_ms"`
	// Produces and ProduceMeanMS: outbox_kafka_produce_duration_seconds
	// (every produce request, one partition's records, ok or error);
	// ProduceOver5MS the share of them slower than 5 ms (from its
	// buckets).
	Produces       int64   `json:"produces"`
	ProduceMeanMS  float64 `json:"produce_mean_ms"`
	ProduceOver5MS float64 `json:"produce_over_5ms"`
	// PublishLatencyMeanMS is outbox_publish_latency_seconds' mean: from
	// the inserting transaction's start (created_at) to Kafka's
	// acknowledgement.
	PublishLatencyMeanMS float64 `json:"publish_latency_mean_ms"`
}

// Drain is the result of a drain run.
type Drain struct {
	// Relays is the number of relays (claim loops for sql-ceiling).
	Relays int `json:"relays"`
	// Events is the preloaded backlog.
	Events int64 `json:"events"`
	// EventsPerS is Events over the time from relay start to the last
	// event received (marked, for sql-ceiling).
	EventsPerS float64 `json:"events_per_s"`
	// Received is how many distinct events the consumer got (0 for
	// sql-ceiling, which publishes nothing).
	Received int64 `json:"received"`
	// DuplicateReceptions counts receptions beyond the first of an event.
	DuplicateReceptions int64 `json:"duplicate_receptions"`
	// PreloadEventsPerS is the rate of the preload (writer API, large
	// transactions).
	PreloadEventsPerS float64 `json:"preload_events_per_s"`
	// RSSMaxMB is the highest VmRSS of the bench process sampled during
	// the drain, and VmHWMMB its peak RSS (reset before the drain where the
	// kernel allows), in MiB. The relay runs inside the bench process,
	// which also holds the consumer and its bookkeeping: an upper bound
	// of the relay's own RSS.
	RSSMaxMB float64 `json:"rss_max_mb"`
	VmHWMMB  float64 `json:"vmhwm_mb"`
	// RelayRSSMaxMiB is the highest VmRSS of the relay process itself,
	// sampled every 100ms from /proc/<pid>/status, and RelayVmHWMMiB its
	// VmHWM (peak RSS over the process's life) at the end of the drain, in
	// MiB: set for notify-proc only (max over the relay processes).
	RelayRSSMaxMiB float64 `json:"relay_rss_max_mib,omitempty"`
	RelayVmHWMMiB  float64 `json:"relay_vmhwm_mib,omitempty"`
	// RelayStartS (notify-proc) is the time from starting the relay
	// process to the first event received: process start, connecting to
	// Postgres and Kafka, the first claim and publish. It is inside
	// DurationS.
	RelayStartS float64 `json:"relay_start_s,omitempty"`
	// Claims is the number of claim statements run.
	Claims int64 `json:"claims"`
}

// Writers is the result of a writers run.
type Writers struct {
	// Connections is the number of concurrent writers, one connection each.
	Connections int `json:"connections"`
	// Wakeups is true with the product's wake-ups (writer default mode,
	// listener and relay running) and false with WakeupNone (relay polling).
	Wakeups bool `json:"wakeups"`
	// WakeupMode is the writer's outbox.WakeupMode.
	WakeupMode string `json:"wakeup_mode"`
	// CommitsPerS is committed transactions per second.
	CommitsPerS float64 `json:"commits_per_s"`
	// Commits is the number of committed transactions; FailedCommits
	// those that failed.
	Commits       int64 `json:"commits"`
	FailedCommits int64 `json:"failed_commits"`
	// Ratio is CommitsPerS over the no-wake-up run's at the same
	// connections (set on the wakeups=true run once both ran).
	Ratio float64 `json:"ratio_vs_no_wakeups,omitempty"`
	// TxP50MS and TxP99MS are one transaction's BEGIN-to-COMMIT time, in
	// ms.
	TxP50MS float64 `json:"tx_p50_ms"`
	TxP99MS float64 `json:"tx_p99_ms"`
	// RelayClaimsPerS is the relay's claim statements per second while the
	// writers ran, RelayNotificationsPerS the notifications it received
	// per second (0 without wake-ups), and RelayEventsPerClaim the events
	// it published per non-empty claim: what the relay cost the database.
	RelayClaimsPerS        float64 `json:"relay_claims_per_s"`
	RelayNotificationsPerS float64 `json:"relay_notifications_per_s"`
	RelayEventsPerClaim    float64 `json:"relay_events_per_claim"`
	relay                  relayStats
}

// BrokerDown is the result of a broker-down run: RSS of the relay process
// (MiB) before, during and after an outage of the broker while writers go
// on at Rate.
type BrokerDown struct {
	// OutageS is how long the broker was down, in seconds.
	OutageS float64 `json:"outage_s"`
	// Outage says how it was down: OutageRefused (kfake refused every
	// connection) or OutageKilled (a real broker SIGKILLed, then
	// restarted).
	Outage string `json:"outage"`
	// RestartS is how long bringing the broker back took, from the end of
	// the outage until it answered again, in seconds: about 0 for kfake,
	// a JVM start and log recovery for a real broker. The relay cannot
	// publish meanwhile; RecoveryS counts from its end.
	RestartS float64 `json:"restart_s"`
	// Rate is the writers' target rate, events/s.
	Rate float64 `json:"rate"`
	// RSSBeforeMiB is the relay's highest VmRSS before the outage (steady
	// traffic), RSSMaxOutageMiB during it, RSSMaxRecoveryMiB from the
	// broker's return until every event was delivered; VmHWMMiB is the
	// process's peak RSS at the end.
	RSSBeforeMiB      float64 `json:"rss_before_mib"`
	RSSMaxOutageMiB   float64 `json:"rss_max_outage_mib"`
	RSSMaxRecoveryMiB float64 `json:"rss_max_recovery_mib"`
	VmHWMMiB          float64 `json:"vmhwm_mib"`
	// WrittenOutage is the number of events committed while the broker
	// was down.
	WrittenOutage int64 `json:"written_outage"`
	// RecoveryS is the time from the broker's return (answering again) to
	// the last event received (the writers stop when the outage ends).
	RecoveryS float64 `json:"recovery_s"`
	// Count is the number of events committed (warm-up excluded);
	// Received how many of them arrived, Lost = Count - Received,
	// Duplicates receptions beyond the first.
	Count      int64 `json:"count"`
	Received   int64 `json:"received"`
	Lost       int64 `json:"lost"`
	Duplicates int64 `json:"duplicates"`
}

// MarshalJSON writes the run with the keys of its scenario's result at
// the top level.
func (r Run) MarshalJSON() ([]byte, error) {
	type plain Run // without this method
	b, err := json.Marshal(plain(r))
	if err != nil || r.BrokerDown == nil {
		return b, err
	}
	bd, err := json.Marshal(r.BrokerDown)
	if err != nil {
		return nil, err
	}
	if len(bd) <= 2 {
		return b, nil
	}
	out := append(b[:len(b)-1:len(b)-1], ',')
	return append(out, bd[1:]...), nil
}

// WriteJSON writes the report to file, indented.
func (r *Report) WriteJSON(file string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, append(b, '\n'), 0o644)
}
