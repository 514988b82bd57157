// Command outbox-bench measures the outbox relay: commit-to-publish latency
// against plain polling, drain throughput against the database's raw
// claim+mark ceiling, and what wake-ups cost the writers. See package
// github.com/pgoutbox/outbox/bench and `outbox-bench --help`.
//
// Without --database-url and --brokers it starts a throwaway Postgres
// (fsync on) and an in-process kfake broker, like `make run`, or with
// --kafka 4.4.0 a real Apache Kafka broker (internal/kafkatemp).
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/peterbourgon/ff/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/pgoutbox/outbox/bench"
)

const usage = `outbox-bench measures the outbox relay end to end.

Usage:
  outbox-bench [flags]

Scenarios (--scenario, comma-separated; run in this order):
  burst    a relay process (notify, its defaults) idles for --idle: the
           database's transactions/s and the relay's CPU-s per 10 s while
           nothing is written (measured from --idle-settle on); then one
           transaction of --burst-events rows (INSERT ... SELECT FROM
           generate_series, pg_notify): its drain rate, and again after
           --short-idle; the ratio of the two rates
  latency  open-loop --rate events/s for --duration through the writer API;
           commit-to-receive latency per mode (HdrHistogram); plus the
           product relay at each of --extra-rates; and what each run cost
           the database (CPU of its processes from /proc, transactions
           from pg_stat_database, WAL) and the relay process (CPU), with
           the relay's share against a writers-only baseline at the same
           load
  deployed the shape users deploy (issue 29): plain-SQL writers (INSERT
           and pg_notify in every transaction, one event each, over
           --deployed-aggregates aggregates) at each of --deployed-rates
           with 1 and --deployed-relays relay processes (their defaults,
           each its own --relay-id), --latency-rounds rounds interleaved
           (A B, B A, ...), after a writers-only baseline per rate; then
           1 and N idle relays (--deployed-idle: database CPU per second);
           then N relays at --restart-rate restarted one by one
           (SIGTERM, replacement with the same --relay-id,
           --restart-interval apart). Prints the N/1 ratios (relays' DB
           CPU per event, total CPU per event, p50 difference, p99, idle
           DB CPU) and the rolling restart (p99, max, lost, order) with
           the goals, PASS or FAIL, and the spread over the rounds
  drain    preload --events rows, start 1 and 2 relays, events/s until the
           consumer has all; plus sql-ceiling (claim+mark loop, no Kafka)
  backlog  preload --backlog-events rows (INSERT ... SELECT), one relay
           process (its defaults) drains them: events/s and the cost
  large-payloads
           preload --large-events rows of --large-payload-bytes (INSERT ...
           SELECT), one relay process (its defaults) drains them: its peak
           RSS (VmHWM), which its claims' byte bound keeps under 256 MiB
  scale    drains (a --scale-events backlog, the relays started together)
           and bursts (--scale-events in one transaction, the relays
           running and settled) with each of --scale-relays relay processes
           at each of --scale-aggregates aggregate counts: events/s, the
           ratio to one relay, DB CPU and transactions per event
  writers  --connections writers committing as fast as they can, with the
           product's wake-ups and with none; commits/s and the ratio
  notify-cost
           writers only (no relay; a session LISTENs) at each of
           --notify-cost-rates commits/s, once per writer wake-up mode
           (none, debounced, every-tx, after-commit): database CPU,
           transactions and WAL per commit, commits/s reached, commit time
  sweep    latency and claim load across --poll-interval x --lease values
  broker-down
           the relay as a process (outbox-relay run); writers at --rate; the
           broker is down for --outage, then returns: kfake refuses every
           connection, a real broker (--kafka 4.4.0) is SIGKILLed (a crash)
           and started again with its data; the relay's RSS before, during
           and after, the broker's restart time, the recovery time and lost
           events (skipped with external --brokers)

Modes (--mode): notify (the product), poll (no LISTEN, writer WakeupNone,
one run per --poll-interval), naive (hand-written SELECT ... FOR UPDATE SKIP
LOCKED / publish / UPDATE / COMMIT poller, one run per --poll-interval),
floor (the same Kafka client and broker, no database), notify-proc (the
notify relay run as an outbox-relay process, so that its own CPU time and
RSS are measured; in latency with the relay's own defaults unless
--relay-proc-flags; the other drain rows' RSS is the whole bench process
with the consumer and the in-process broker), notify-every-tx (latency
only: the simple design beside notify-proc, the same relay process with
--claim-window off, no lingering and no busy schedule, and writers that
notify in every transaction, outbox.WakeupEveryTx), notify-proc-b
(latency and drain: notify-proc exactly, with the binary --relay-bin-b
names instead of --relay-bin's, to compare two builds in one run).

--latency-rounds N runs the latency modes N times at each rate,
interleaved (A B, B A, A B ...), to show the spread between runs. With
modes notify-proc and notify-proc-b the tables end with an A/B table: per
rate and figure, each binary's median and range over its runs, and which
is worse by more than the spread (make bench-ab).

notify-proc, notify-every-tx, burst, backlog, large-payloads and
broker-down run the outbox-relay binary given by --relay-bin, or one built
with "go build" into a temporary directory (this needs the go command and
the current directory inside the module).

The goals table at the end checks the relay's targets (1000/s p50, p99,
max, relay DB CPU and transactions per event; 10000/s and 10/s p99; idle
transactions/s and relay CPU; burst ratio; backlog events/s; relay peak
RSS with large payloads): PASS, FAIL,
or n/a when not measured.

Every latency run (but the writers-only baselines) also measures the
broker's own floor under the same load: a producer of its own sends one
record per call every 1/--floor-probe-rate s to a topic of its own and a
consumer reads it back (floor_p50_ms, floor_p99_ms in the tables).

Every flag can also be set in the environment as OUTBOX_<FLAG_NAME>
(--poll-interval is OUTBOX_POLL_INTERVAL); the database URL also as
DATABASE_URL. Without --database-url a throwaway Postgres (fsync on) is
started; without --brokers the broker --kafka names: the in-process kfake
(default), or a real Apache Kafka broker of that version (4.4.0, 3.9.1)
started with internal/kafkatemp (java and mvn needed; G1 and the full JIT
as in production, 1 GiB heap), warmed up for --kafka-warmup before the
first run and stopped at the end.

Flags:
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// listFlag is a comma-separated list flag.
type listFlag[T any] struct {
	vals  *[]T
	parse func(string) (T, error)
	show  func(T) string
}

func (l listFlag[T]) String() string {
	if l.vals == nil {
		return ""
	}
	s := make([]string, len(*l.vals))
	for i, v := range *l.vals {
		s[i] = l.show(v)
	}
	return strings.Join(s, ",")
}

func (l listFlag[T]) Set(s string) error {
	var out []T
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := l.parse(f)
		if err != nil {
			return err
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return errors.New("empty list")
	}
	*l.vals = out
	return nil
}

func durations(p *[]time.Duration) listFlag[time.Duration] {
	return listFlag[time.Duration]{p, time.ParseDuration, time.Duration.String}
}

func ints(p *[]int) listFlag[int] {
	return listFlag[int]{p, strconv.Atoi, strconv.Itoa}
}

func floats(p *[]float64) listFlag[float64] {
	return listFlag[float64]{p, func(s string) (float64, error) { return strconv.ParseFloat(s, 64) },
		func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }}
}

func strs(p *[]string) listFlag[string] {
	return listFlag[string]{p, func(s string) (string, error) { return strings.ToLower(s), nil }, func(s string) string { return s }}
}

type options struct {
	suite       bench.SuiteConfig
	databaseURL string
	brokers     string
	kafka       string
	kafkaCPUs   string
	kafkaWarmup time.Duration
	floorRate   float64
	partitions  int
	jsonFile    string
	plotFile    string
	costPlot    string
	progress    time.Duration
	logLevel    string
	cpuProfile  string
	relayBin    string
	relayBinB   string
	formatB     string // --value-format-b
}

func register(fs *flag.FlagSet, o *options) {
	s := &o.suite
	s.Scenarios = []string{bench.ScenarioLatency, bench.ScenarioDrain, bench.ScenarioWriters}
	s.Modes = []string{bench.ModeNotify, bench.ModePoll, bench.ModeNaive, bench.ModeFloor}
	s.PollIntervals = []time.Duration{500 * time.Millisecond}
	s.Leases = []time.Duration{30 * time.Second}
	s.DrainRelays = []int{1, 2}
	s.Connections = []int{16, 32, 64}

	fs.StringVar(&o.databaseURL, "database-url", os.Getenv("DATABASE_URL"), "PostgreSQL URL (env OUTBOX_DATABASE_URL or DATABASE_URL); empty: start a throwaway cluster with fsync on")
	fs.StringVar(&o.brokers, "brokers", "", "Kafka bootstrap brokers, comma-separated host:port; empty: start the broker --kafka names")
	fs.StringVar(&o.kafka, "kafka", bench.KafkaKfake, "the broker to start without --brokers: kfake (in-process), or an Apache Kafka version, e.g. 4.4.0 or 3.9.1 (internal/kafkatemp: needs java and mvn)")
	fs.StringVar(&o.kafkaCPUs, "kafka-cpus", "", "pin the real broker's JVM to these CPUs (taskset -c list, e.g. 1); empty: not pinned")
	fs.DurationVar(&o.kafkaWarmup, "kafka-warmup", bench.DefaultKafkaWarmup, "how long to warm a real broker up (produce and consume) before the first run; negative: not at all")
	fs.Float64Var(&o.floorRate, "floor-probe-rate", bench.DefaultFloorProbeRate, "latency: records/s of the broker's floor probe in every run (one record per Publish call to a topic of its own); 0: off")
	fs.IntVar(&o.partitions, "partitions", 1, "partitions of each run's topic")
	fs.Var(strs(&s.Scenarios), "scenario", "scenarios: latency,deployed,drain,writers,notify-cost,sweep,broker-down,burst,backlog,large-payloads,scale")
	fs.Var(strs(&s.Modes), "mode", "modes: notify,poll,naive,floor,notify-proc,notify-proc-b,notify-every-tx (notify-proc: the relay as a process, latency and drain; notify-proc-b: the same with --relay-bin-b's binary; notify-every-tx: that process with --claim-window off, writers notifying in every transaction, latency only)")
	fs.Var(durations(&s.PollIntervals), "poll-interval", "poll intervals of the poll and naive modes (one run each) and of the sweep, e.g. 50ms,100ms,500ms")
	fs.Var(durations(&s.PollIntervals), "poll-intervals", "alias of --poll-interval")
	fs.Var(durations(&s.Leases), "lease", "leases of the sweep (the first is used elsewhere), e.g. 5s,30s")
	fs.DurationVar(&s.FallbackPoll, "fallback-poll", 500*time.Millisecond, "the notify relay's fallback poll interval (outside the sweep)")
	fs.IntVar(&s.BatchSize, "batch-size", 500, "most events per claim")
	fs.DurationVar(&s.ClaimWindow, "claim-window", 0, "the relay's --claim-window (0: its default; negative: off)")
	fs.DurationVar(&s.ClaimWindowPoll, "claim-window-poll", 0, "the relay's --claim-window-poll (0: its default, 500µs); longer: fewer claims per event, more latency")
	fs.DurationVar(&s.BusyClaimInterval, "busy-claim-interval", 0, "the relays' --busy-claim-interval (0: their default, 20ms), also for notify-proc; shorter: lower latency above 2,000 events/s, more claims")
	s.Rates = []float64{1000}
	fs.Var(floats(&s.Rates), "rate", "latency: arrival rates, events/s (open loop), comma-separated: every mode runs at each (the first is also broker-down's and the sweep's rate)")
	fs.Var(strs(&s.LatencyWriters), "latency-writers", "latency: the writers' kinds, each mode run once per kind, interleaved: "+bench.WriterGo+" (outbox.Writer, the default), "+bench.WriterPlainSQL+" (INSERT and pg_notify naming the key partition in every transaction, the README's example), "+bench.WriterPlainSQLAll+" (the same with an empty payload)")
	fs.IntVar(&s.LatencyRounds, "latency-rounds", 1, "latency: runs of every mode at each rate, interleaved: the modes in order, then reversed, and so on (A B, B A, ...)")
	fs.DurationVar(&s.Latency.Duration, "duration", 30*time.Second, "latency: how long events are sent per run")
	fs.IntVar(&s.Latency.Writers, "writers", 8, "latency: writer goroutines (one connection each)")
	fs.IntVar(&s.Latency.EventsPerTx, "events-per-tx", 1, "latency: events per transaction")
	fs.DurationVar(&s.Latency.Grace, "grace", 10*time.Second, "latency: how long after the last commit an event may still arrive before it counts as lost")
	fs.DurationVar(&s.Latency.IdleWindow, "idle-window", 2*time.Second, "latency: how long to watch the idle relay's claim rate after the run (0: off)")
	fs.IntVar(&s.Latency.PayloadBytes, "payload-bytes", 100, "approximate JSON payload size, bytes")
	fs.IntVar(&s.Latency.Aggregates, "aggregates", 1000, "distinct aggregate IDs (Kafka keys)")
	fs.DurationVar(&s.SweepDuration, "sweep-duration", 10*time.Second, "sweep: how long events are sent per run")
	fs.Var(floats(&s.ExtraRates), "extra-rates", "latency: further rates, events/s, for the product relay only (notify-proc if in --mode, else notify), e.g. 10000,10; at least one writer per 400 events/s")
	fs.StringVar(&s.WritersWakeup, "writers-wakeup", "", "writers: the writers' wake-up mode in the runs with wake-ups: debounced (default), every-tx or after-commit")
	fs.Var(floats(&s.NotifyCostRates), "notify-cost-rates", "notify-cost: commit rates, per second (default 10,1000,10000)")
	fs.IntVar(&s.MinEvents, "min-events", 200, "latency: every run lasts at least this many events (a longer --duration at low rates)")
	fs.DurationVar(&s.BaselineDuration, "baseline-duration", 0, "latency and sweep: how long each writers-only baseline writes (0: --duration; negative: no baselines, no relay share of the cost)")
	fs.BoolVar(&s.NoCost, "no-cost", false, "do not measure what runs cost (DB and relay CPU, transactions, WAL) and run no baselines")
	fs.BoolVar(&s.ProcFlags, "relay-proc-flags", false, "give the relay processes of latency (notify-proc), burst and backlog --fallback-poll, the first --lease, --batch-size, --claim-window and --claim-window-poll (retention off) instead of the relay's own defaults")
	fs.DurationVar(&s.Burst.Idle, "idle", 60*time.Second, "burst: how long the relay idles before the first burst; the idle cost is measured over it")
	fs.DurationVar(&s.Burst.IdleSettle, "idle-settle", 10*time.Second, "burst: where in --idle the idle-cost window starts (an idle connection's statistics reach pg_stat_database 10 s after its last transaction)")
	fs.DurationVar(&s.Burst.ShortIdle, "short-idle", time.Second, "burst: the idle time before the second burst")
	fs.IntVar(&s.Burst.Events, "burst-events", 100000, "burst: events per burst (one transaction)")
	fs.IntVar(&s.Backlog.Events, "backlog-events", 1000000, "backlog: preloaded events")
	fs.IntVar(&s.LargePayloads.Events, "large-events", 2000, "large-payloads: preloaded events")
	fs.IntVar(&s.LargePayloads.PayloadBytes, "large-payload-bytes", 900000, "large-payloads: approximate JSON payload size of each, bytes")
	fs.IntVar(&s.Drain.Events, "events", 200000, "drain: preloaded events")
	fs.Var(ints(&s.DrainRelays), "relays", "drain: relay counts, e.g. 1,2")
	fs.Var(ints(&s.Scale.Relays), "scale-relays", "scale: relay counts, e.g. 1,2,3 (default 1,2,3; ratios divide by the 1-relay run)")
	fs.Var(ints(&s.Scale.Aggregates), "scale-aggregates", "scale: aggregate counts, e.g. 100,1000,100000 (default 100,1000,100000)")
	fs.IntVar(&s.Scale.Events, "scale-events", 100000, "scale: events of each drain's backlog and each burst's transaction")
	fs.IntVar(&s.Scale.Rounds, "scale-rounds", bench.DefaultScaleRounds, "scale: runs of each drain and burst per relay count, interleaved; the median counts")
	fs.Func("scale-partitions", "scale: partitions of the scale runs' topics (default 12)", func(v string) error {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 1 {
			return fmt.Errorf("want a positive number, got %q", v)
		}
		s.Scale.Partitions = int32(n)
		return nil
	})
	fs.Var(floats(&s.Deployed.Rates), "deployed-rates", "deployed: rates, events/s, of the 1 vs N relays runs (default 500,1000)")
	fs.IntVar(&s.Deployed.Relays, "deployed-relays", 3, "deployed: the relay count compared with one relay")
	fs.StringVar(&s.Deployed.Writer, "deployed-writer", bench.WriterPlainSQL, "deployed: the writers' kind, "+bench.WriterPlainSQL+" (pg_notify naming each event's key partition, as the README) or "+bench.WriterPlainSQLAll+" (an empty payload: every relay wakes)")
	fs.IntVar(&s.Deployed.Aggregates, "deployed-aggregates", 200, "deployed: distinct aggregate IDs of the plain-SQL writers' events")
	fs.DurationVar(&s.Deployed.IdleWindow, "deployed-idle", 10*time.Second, "deployed: how long each idle run (1 and N relays) measures the database's CPU; negative: no idle runs")
	fs.Float64Var(&s.Deployed.RestartRate, "restart-rate", 500, "deployed: the rolling-restart run's rate, events/s; negative: no rolling restart")
	fs.DurationVar(&s.Deployed.RestartInterval, "restart-interval", 8*time.Second, "deployed: time between two relay restarts of the rolling-restart run (which lasts (N+1) x this)")
	fs.Var(ints(&s.Connections), "connections", "writers: connection counts, e.g. 16,32,64")
	fs.DurationVar(&s.Writers.Duration, "writers-duration", 0, "writers: how long each run writes (0: --duration)")
	fs.DurationVar(&s.BrokerDown.Outage, "outage", 20*time.Second, "broker-down: how long the broker refuses connections (writers go on at --rate)")
	fs.DurationVar(&s.BrokerDown.Before, "outage-before", 3*time.Second, "broker-down: normal traffic before the outage (the baseline RSS)")
	fs.StringVar(&o.relayBin, "relay-bin", "", "outbox-relay binary for notify-proc, notify-every-tx and broker-down (empty: go build github.com/pgoutbox/outbox/cmd/outbox-relay into a temporary directory, from inside the repository)")
	fs.StringVar(&o.relayBinB, "relay-bin-b", "", "outbox-relay binary for mode notify-proc-b (required by it, unless --value-format-b): B of an A/B, e.g. the build before a change, --relay-bin being A")
	fs.StringVar(&o.formatB, "value-format-b", "", "mode notify-proc-b's relays encode values in this format (avro, json-schema or protobuf) against a Schema Registry the bench runs in-process (franz-go's srfake) with the payload's schema; --relay-bin-b defaults to --relay-bin then")
	fs.StringVar(&o.jsonFile, "json", "", "write the report as JSON to this file")
	fs.StringVar(&o.plotFile, "plot", "", "write the latency CDF plot to this file (.png or .svg)")
	fs.StringVar(&o.costPlot, "cost-plot", "", "write the latency-against-DB-CPU-per-event plot to this file (.png or .svg; empty: --plot's name with -cost before the extension, none without --plot; \"-\": none)")
	fs.DurationVar(&o.progress, "progress", 2*time.Second, "progress line interval on stderr (0: off)")
	fs.StringVar(&o.logLevel, "log-level", "warn", "log level: debug, info, warn or error")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the bench process (relay included) to this file")
}

// Main runs the command with args and returns the exit code: 0 when every
// run succeeded, 1 when a run failed, 2 for a usage error.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("outbox-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	register(fs, &o)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	if err := ff.Parse(fs, args, ff.WithEnvVarPrefix("OUTBOX")); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "outbox-bench: %v\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "outbox-bench: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if err := run(ctx, &o, args, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "outbox-bench: %v\n", err)
		var ue usageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	return 0
}

type usageError struct{ error }

func run(ctx context.Context, o *options, args []string, stdout, stderr io.Writer) error {
	level, err := zapcore.ParseLevel(o.logLevel)
	if err != nil {
		return usageError{fmt.Errorf("--log-level: %q is not one of debug, info, warn, error", o.logLevel)}
	}
	o.derive()
	if err := o.suite.Validate(); err != nil {
		return usageError{errors.New(flagError(err))}
	}
	if o.partitions < 1 {
		return usageError{errors.New("--partitions: must be positive")}
	}
	if err := o.checkRelayBins(); err != nil {
		return usageError{err}
	}
	var brokers []string
	for _, b := range strings.Split(o.brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			brokers = append(brokers, b)
		}
	}
	ec := zap.NewDevelopmentEncoderConfig()
	log := zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(ec), zapcore.Lock(zapcore.AddSync(stderr)), level)).Named("outbox-bench")
	defer func() { _ = log.Sync() }()

	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	lcfg := bench.LocalConfig{DSN: o.databaseURL, Brokers: brokers, Kafka: o.kafka, KafkaCPUs: o.kafkaCPUs, KafkaWarmup: o.kafkaWarmup, Log: log}
	if err := lcfg.Validate(); err != nil {
		return usageError{errors.New(flagError(err))}
	}
	if o.databaseURL == "" || len(brokers) == 0 {
		broker := "in-process kfake"
		if o.kafka != bench.KafkaKfake {
			broker = "Apache Kafka " + o.kafka + ", warmed up for " + o.kafkaWarmup.String()
		}
		fmt.Fprintf(stderr, "bench: starting the local stack (throwaway Postgres with fsync on, %s) for what was not given ...\n", broker)
	}
	local, err := bench.StartLocal(ctx, lcfg)
	if err != nil {
		return err
	}
	defer func() {
		if err := local.Close(); err != nil {
			log.Error("stop the local stack", zap.Error(err))
		}
	}()
	env := &bench.Env{
		DSN: local.DSN, Brokers: local.Brokers, Partitions: int32(o.partitions), Log: log,
		Broker: local.Broker(), BrokerOutage: local.BrokerOutage(),
	}
	if local.CanTakeBrokerDown() {
		env.SetBrokerUp = local.SetBrokerUp
	}
	if local.BrokerPID() > 0 {
		env.BrokerPID = local.BrokerPID
	}
	if needBin := o.suite.NeedsRelayBin(local.CanTakeBrokerDown()); needBin {
		env.RelayBin = o.relayBin
		if env.RelayBin == "" {
			dir, err := os.MkdirTemp("", "outbox-bench-relay-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			fmt.Fprintln(stderr, "bench: building cmd/outbox-relay for the relay-process runs ...")
			if env.RelayBin, err = bench.BuildRelay(ctx, dir); err != nil {
				return fmt.Errorf("%w (or pass --relay-bin)", err)
			}
		}
	}
	if o.suite.NeedsRelayBinB() {
		env.RelayBinB = cmp.Or(o.relayBinB, env.RelayBin)
	}
	if o.formatB != "" {
		reg, err := bench.StartRegistry(ctx, o.formatB)
		if err != nil {
			return err
		}
		defer reg.Close()
		env.RelayArgsB = reg.RelayArgs(o.formatB)
	}
	if o.progress > 0 {
		env.Progress = &bench.Progress{W: stderr, Interval: o.progress}
	}
	rep := &bench.Report{
		Machine: bench.DescribeMachine(ctx, local.DSN),
		Command: "outbox-bench " + strings.Join(redactArgs(args), " "),
		Started: time.Now().UTC().Truncate(time.Second),
	}
	rep.RelayArgsB = env.RelayArgsB
	rep.Machine.Broker = env.Broker
	rep.Machine.BrokerJVMFlags = local.BrokerJVMFlags()
	rep.Machine.BrokerCPUs = local.BrokerCPUs()
	rep.Machine.BrokerWarmup = local.Warmup
	for _, x := range []struct {
		bin string
		to  **bench.RelayBinary
	}{{env.RelayBin, &rep.RelayBin}, {env.RelayBinB, &rep.RelayBinB}} {
		if x.bin != "" {
			b := bench.DescribeRelayBin(ctx, x.bin)
			*x.to = &b
		}
	}
	rep.Machine.PostgresSource = "external"
	if local.Pgtemp() {
		rep.Machine.PostgresSource = "pgtemp"
	}
	start := time.Now()
	save := func() error {
		rep.ElapsedS = time.Since(start).Seconds()
		if o.jsonFile != "" {
			if err := rep.WriteJSON(o.jsonFile); err != nil {
				return err
			}
		}
		return nil
	}
	suiteErr := env.RunSuite(ctx, o.suite, rep, func(r bench.Run) {
		if r.Error != "" {
			fmt.Fprintf(stderr, "bench: %s %s failed: %s\n", r.Scenario, bench.RunLabel(&r), r.Error)
		}
		_ = save() // partial results survive an interrupted suite
	})
	rep.WriteTable(stdout)
	fmt.Fprintf(stdout, "suite took %s\n", time.Since(start).Round(time.Second))
	if err := save(); err != nil {
		return err
	}
	if o.jsonFile != "" {
		fmt.Fprintf(stderr, "bench: wrote %s\n", o.jsonFile)
	}
	if o.plotFile != "" {
		if err := rep.WritePlot(o.plotFile); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "bench: wrote %s\n", o.plotFile)
	}
	if costPlot := costPlotFile(o.costPlot, o.plotFile); costPlot != "" {
		if err := rep.WriteCostPlot(costPlot); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "bench: wrote %s\n", costPlot)
	}
	if suiteErr != nil {
		return suiteErr
	}
	for _, r := range rep.Runs {
		if r.Error != "" {
			return errors.New("some runs failed (see the table)")
		}
	}
	return nil
}

// derive sets the suite's fields that follow from others: the writers',
// drains' and broker-down's templates from the latency flags, the latency
// template's rate (the first --rate) and the floor probe's rate
// (--floor-probe-rate 0: off).
func (o *options) derive() {
	if o.Writers().Duration == 0 {
		o.suite.Writers.Duration = o.suite.Latency.Duration
	}
	o.suite.Drain.PayloadBytes = o.suite.Latency.PayloadBytes
	o.suite.Drain.Aggregates = o.suite.Latency.Aggregates
	o.suite.Writers.PayloadBytes = o.suite.Latency.PayloadBytes
	o.suite.Writers.Aggregates = o.suite.Latency.Aggregates
	o.suite.Latency.Rate = o.suite.Rates[0]
	o.suite.Latency.FloorProbeRate = o.floorRate
	if o.floorRate == 0 {
		o.suite.Latency.FloorProbeRate = -1 // off
	}
	o.suite.BrokerDown.Rate = o.suite.Latency.Rate
	o.suite.BrokerDown.Writers = o.suite.Latency.Writers
	o.suite.BrokerDown.PayloadBytes = o.suite.Latency.PayloadBytes
	o.suite.BrokerDown.Aggregates = o.suite.Latency.Aggregates
}

// checkRelayBins checks --relay-bin and --relay-bin-b before anything is
// started: mode notify-proc-b needs --relay-bin-b and --relay-bin-b needs
// that mode; a binary given must exist and be executable.
func (o *options) checkRelayBins() error {
	hasB := slices.Contains(o.suite.Modes, bench.ModeNotifyProcB)
	switch {
	case o.formatB != "" && !hasB:
		return errors.New("--value-format-b: only mode notify-proc-b runs it, and --mode has no notify-proc-b")
	case hasB && o.relayBinB == "" && o.formatB == "":
		return errors.New("--relay-bin-b: required by --mode notify-proc-b (the outbox-relay binary it runs, beside --relay-bin's)")
	case !hasB && o.relayBinB != "":
		return errors.New("--relay-bin-b: only mode notify-proc-b runs it, and --mode has no notify-proc-b")
	}
	for _, x := range []struct{ flag, path string }{{"--relay-bin", o.relayBin}, {"--relay-bin-b", o.relayBinB}} {
		if x.path == "" {
			continue
		}
		if err := bench.CheckRelayBin(x.path); err != nil {
			return fmt.Errorf("%s: %w", x.flag, err)
		}
	}
	return nil
}

// costPlotFile returns where the cost plot goes: flag if set ("-": none),
// else plot's name with "-cost" before its extension ("" without plot).
func costPlotFile(flag, plot string) string {
	switch {
	case flag == "-":
		return ""
	case flag != "":
		return flag
	case plot == "":
		return ""
	}
	ext := filepath.Ext(plot)
	return strings.TrimSuffix(plot, ext) + "-cost" + ext
}

// Writers returns the writers template (a helper for defaults).
func (o *options) Writers() *bench.WritersConfig { return &o.suite.Writers }

// flagError names the flag behind a SuiteConfig validation error.
func flagError(err error) string {
	s := err.Error()
	for field, fl := range map[string]string{
		"SuiteConfig.Scenarios": "--scenario", "SuiteConfig.Modes": "--mode",
		"SuiteConfig.PollIntervals": "--poll-interval", "SuiteConfig.Leases": "--lease",
		"SuiteConfig.DrainRelays": "--relays", "SuiteConfig.Connections": "--connections",
		"LatencyConfig.Rate": "--rate", "SuiteConfig.Rates": "--rate", "LatencyConfig.FloorProbeRate": "--floor-probe-rate",
		"LocalConfig.Kafka": "--kafka", "LocalConfig.KafkaCPUs": "--kafka-cpus",
		"LatencyConfig.Duration": "--duration", "LatencyConfig.Writers": "--writers",
		"LatencyConfig.EventsPerTx": "--events-per-tx", "LatencyConfig.PayloadBytes": "--payload-bytes",
		"LatencyConfig.Aggregates": "--aggregates", "LatencyConfig.Grace": "--grace", "LatencyConfig.IdleWindow": "--idle-window",
		"BrokerDownConfig.Rate": "--rate", "BrokerDownConfig.Writers": "--writers", "BrokerDownConfig.Outage": "--outage",
		"SuiteConfig.ExtraRates": "--extra-rates", "SuiteConfig.LatencyWriters": "--latency-writers", "SuiteConfig.MinEvents": "--min-events", "SuiteConfig.NotifyCostRates": "--notify-cost-rates", "SuiteConfig.WritersWakeup": "--writers-wakeup", "WritersConfig.WakeupMode": "--writers-wakeup",
		"DeployedConfig.Rates": "--deployed-rates", "DeployedConfig.Relays": "--deployed-relays", "DeployedConfig.Aggregates": "--deployed-aggregates", "DeployedConfig.Writer": "--deployed-writer",
		"ScaleConfig.Relays": "--scale-relays", "ScaleConfig.Aggregates": "--scale-aggregates", "ScaleConfig.Events": "--scale-events", "ScaleConfig.Rounds": "--scale-rounds",
		"BurstConfig.Events": "--burst-events", "BurstConfig.IdleSettle": "--idle-settle", "SuiteConfig.Backlog.Events": "--backlog-events",
		"SuiteConfig.LargePayloads.Events": "--large-events", "SuiteConfig.LargePayloads.PayloadBytes": "--large-payload-bytes",
	} {
		if i := strings.Index(s, field+": "); i >= 0 {
			return fl + ": " + s[i+len(field)+2:]
		}
	}
	return s
}

// redactArgs hides a password in --database-url for the report.
func redactArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if strings.Contains(a, "://") && strings.Contains(a, "@") {
			out[i] = "<database-url>"
		}
	}
	return out
}
