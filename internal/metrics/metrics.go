// Package metrics exposes the relay's Prometheus metrics and its health
// endpoints over HTTP, on a registry of its own (never the global default
// registry).
//
// Three kinds of metrics:
//
//   - Table gauges, computed from SQL every Config.Interval (5s by
//     default): outbox_oldest_unpublished_age_seconds (the one to alert on),
//     outbox_unpublished_events and outbox_dead_letter_events. Each refresh
//     is one statement that reads only the partial indexes of unpublished
//     rows and of dead letters, so it is cheap however much published
//     history the table keeps. Every relay on a table reports the same
//     values; aggregate them with max(), not sum().
//   - Relay counters read at scrape time from relay.Relay.Stats(),
//     listen.Listener and the cleaner: outbox_relay_*_total,
//     outbox_listener_connected, outbox_notifications_received_total,
//     outbox_listener_reconnects_total.
//   - The table check (CheckTable, every Config.Interval beside the table
//     gauges): the outbox table or its sequence made UNLOGGED, the
//     sequence behind the table's seqs (both fail the "table" readiness
//     check naming the fix), and the database's logical replication slots
//     (outbox_replication_slot_retained_wal_bytes{slot},
//     outbox_replication_slot_active{slot}).
//   - Per-event metrics fed by the relay through relay.Observer, which
//     Metrics implements (set it as relay.Config.Observer):
//     outbox_published_events_total{topic} and
//     the insert-to-ack latency histogram outbox_publish_latency_seconds.
//
// Handler serves /metrics, /healthz (200 while the process runs) and
// /readyz (200 only when the database answers a ping, the listener is
// listening or the relay runs poll-only, and the broker answers a ping; 503
// with a JSON body naming what failed otherwise; each check is bounded by
// Config.CheckTimeout and results are cached for Config.ReadyCacheTTL).
//
// The package is internal: cmd/outbox-relay (and cmd/outbox-dev) wire it, so
// its API can follow the command's flags; an embedding service gets the same
// events through relay.Observer and relay.Relay.Stats.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/config"
	"github.com/pgoutbox/outbox/internal/listen"
	"github.com/pgoutbox/outbox/internal/produce"
	"github.com/pgoutbox/outbox/relay"
)

// Config configures Metrics. The zero value is usable: every field has a
// default.
type Config struct {
	// Table is the outbox table, optionally schema-qualified. Defaults to
	// "outbox".
	Table string
	// AggregateColumn is the table's aggregate ID column (lease.Columns).
	// Defaults to "aggregate_id".
	AggregateColumn string
	// DefaultTopic is the relay's topic for rows whose topic column is
	// NULL; it labels those rows in outbox_published_events_total. Defaults
	// to "" (such rows are labelled topic="").
	DefaultTopic string
	// Interval is how often the table gauges are recomputed from SQL.
	// Defaults to 5s; at least 100ms.
	Interval time.Duration
	// QueryTimeout bounds one refresh of the table gauges. Defaults to
	// 5s.
	QueryTimeout time.Duration
	// CheckTimeout bounds each readiness check (database ping, broker
	// ping). Defaults to 1s.
	CheckTimeout time.Duration
	// ReadyCacheTTL is how long a readiness result is reused, so that
	// frequent probes do not ping the database and the broker each time.
	// Defaults to 2s; negative disables the cache.
	ReadyCacheTTL time.Duration
	// ReadyMaxAge makes readiness fail while the oldest claimable event
	// (unpublished, not dead-lettered, not leased or backing off, and not
	// waiting behind an earlier event of its aggregate) is older than
	// this, by the table gauges' last refresh. Defaults to 0 (off).
	ReadyMaxAge time.Duration
	// SnapshotWarnAfter: while another transaction in the database has held
	// a snapshot for longer than this, the refresher logs a warning naming
	// it (pid, application_name, age) every 5 minutes. Defaults to
	// DefaultSnapshotWarnAfter (5m); negative disables the warning (the
	// gauge outbox_oldest_snapshot_age_seconds stays).
	SnapshotWarnAfter time.Duration
	// Topics are checked to exist by the "broker" readiness check when the
	// attached broker can (Components.Broker implements TopicChecker):
	// the relay's --topic. Defaults to none.
	Topics []string
}

// Defaults of Config.
const (
	// DefaultInterval is Config.Interval's default.
	DefaultInterval = 5 * time.Second
	// DefaultQueryTimeout is Config.QueryTimeout's default.
	DefaultQueryTimeout = 5 * time.Second
	// DefaultCheckTimeout is Config.CheckTimeout's default.
	DefaultCheckTimeout = time.Second
	// DefaultReadyCacheTTL is Config.ReadyCacheTTL's default.
	DefaultReadyCacheTTL = 2 * time.Second
	// DefaultSnapshotWarnAfter is Config.SnapshotWarnAfter's default.
	DefaultSnapshotWarnAfter = 5 * time.Minute
	// DefaultAddr is the run command's default --metrics-addr.
	DefaultAddr = ":9090"
)

// WithDefaults returns a copy of c with every zero field set to its
// default.
func (c Config) WithDefaults() Config {
	if c.Table == "" {
		c.Table = config.DefaultTable
	}
	if c.AggregateColumn == "" {
		c.AggregateColumn = "aggregate_id"
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.QueryTimeout == 0 {
		c.QueryTimeout = DefaultQueryTimeout
	}
	if c.CheckTimeout == 0 {
		c.CheckTimeout = DefaultCheckTimeout
	}
	if c.ReadyCacheTTL == 0 {
		c.ReadyCacheTTL = DefaultReadyCacheTTL
	}
	if c.SnapshotWarnAfter == 0 {
		c.SnapshotWarnAfter = DefaultSnapshotWarnAfter
	}
	return c
}

// Validate returns a *outbox.FieldError naming the first invalid field of c
// with its defaults applied; c itself is not changed.
func (c Config) Validate() error {
	c = c.WithDefaults()
	bad := func(field, format string, args ...any) error {
		return config.Invalid("metrics", field, format, args...)
	}
	switch {
	case strings.Count(c.Table, ".") > 1:
		return bad("Table", "%q is not a table or schema.table name", c.Table)
	case c.Interval < 100*time.Millisecond:
		return bad("Interval", "must be at least 100ms, got %s", c.Interval)
	case c.QueryTimeout <= 0:
		return bad("QueryTimeout", "must be positive, got %s", c.QueryTimeout)
	case c.CheckTimeout <= 0:
		return bad("CheckTimeout", "must be positive, got %s", c.CheckTimeout)
	case c.ReadyMaxAge < 0:
		return bad("ReadyMaxAge", "must not be negative, got %s", c.ReadyMaxAge)
	}
	return nil
}

// DB is what Metrics needs from the database; *pgxpool.Pool implements it.
type DB interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	Ping(ctx context.Context) error
}

// RelaySource gives the relay's cumulative counters and whether it moves
// events; *relay.Relay implements it.
type RelaySource interface {
	Stats() relay.Stats
	Health() relay.Health
}

// ListenerSource gives the notification listener's state and counters;
// *listen.Listener implements it.
type ListenerSource interface {
	State() listen.State
	Notifications() int64
	Ignored() int64
	Reconnects() int64
}

// Pinger checks that a dependency answers; *produce.Publisher implements it.
// Ping must return within ctx's deadline.
type Pinger interface {
	Ping(ctx context.Context) error
}

// TopicChecker checks that topics exist; *produce.Publisher implements it.
// The "broker" readiness check uses it, when the attached Broker has it,
// for Config.Topics.
type TopicChecker interface {
	CheckTopics(ctx context.Context, topics ...string) error
}

// Components are the running relay's parts, given to Metrics.Attach once
// they exist (after the start-up wait for the database and the broker).
type Components struct {
	// Relay provides the outbox_relay_* counters and its Health, which the
	// "relay" readiness check reports. Required for readiness.
	Relay RelaySource
	// Listener provides the listener metrics and the listener readiness
	// check; nil means the relay runs poll-only (--no-notify), which is
	// ready without a listener and exposes no listener metrics.
	Listener ListenerSource
	// Broker is pinged by the readiness check. Required for readiness.
	Broker Pinger
	// Registry, set when the value format uses a Schema Registry, is
	// pinged by the "registry" readiness check; its Stats feed the
	// outbox_schema_* counters. nil: no registry.
	Registry RegistrySource
}

// RegistrySource is the Schema Registry client (*serde.Encoder).
type RegistrySource interface {
	Pinger
	// Stats returns requests sent to the registry, encodings served from
	// the cache, and events that did not fit their schema.
	Stats() (requests, hits, faults int64)
}

// Metrics holds the registry, the table gauges' refresher and the
// readiness checks.
type Metrics struct {
	cfg Config
	db  DB
	log *zap.Logger
	reg *prometheus.Registry
	// statements are the SQL, rendered by New (statements.go).
	*statements
	// ownedAge is the age of the oldest claimable row of the key
	// partitions the attached relay owns (statements.owned) at the last
	// refresh, and ownedAt when it was read (unix nanos); age 0: none.
	ownedAge, ownedAt atomic.Int64

	comps    atomic.Pointer[Components]
	stopping atomic.Bool

	unpublished   prometheus.Gauge
	deadLetters   prometheus.Gauge
	refreshErrors prometheus.Counter
	lastRefresh   prometheus.Gauge
	published     *prometheus.CounterVec
	latency       prometheus.Histogram
	publishErrors *prometheus.CounterVec
	claimDur      *prometheus.HistogramVec
	batchSize     prometheus.Histogram
	markDur       prometheus.Histogram
	takeovers     prometheus.Counter
	leaseLost     prometheus.Counter
	markErrors    prometheus.Counter

	oview          oldestView
	refreshFailing atomic.Bool
	// starting is what the relay waits for before Attach (SetStarting).
	starting    atomic.Pointer[string]
	snap        snapshotWatch
	tcheck      tableCheck
	tparts      timePartitions
	tableChecks prometheus.Counter
	// oldest is the last refresh's view of the oldest events, from which
	// the age gauges are computed at scrape time.
	oldest atomic.Pointer[oldestSnapshot]
	// counts are the last counts read (unpublished, dead letters), for
	// the refreshes that read the ages only.
	counts atomic.Pointer[[2]int64]

	readyMu     sync.Mutex
	readyAt     time.Time
	readyResult Readiness

	kafka kafkaMetrics
}

// LatencyBuckets are the bounds, in seconds, of
// outbox_publish_latency_seconds: 1ms doubling to about 65s.
var LatencyBuckets = prometheus.ExponentialBuckets(0.001, 2, 17)

// StatementBuckets are the bounds, in seconds, of the claim and mark
// durations: 1-2-5 steps from 0.1 ms to 10 s, so that targets such as "p99
// under 10 ms" fall on a bound.
var StatementBuckets = []float64{0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10}

// New returns Metrics on db (the relay's pool) with its own registry,
// holding the table gauges, the per-event metrics and Go runtime and
// process collectors. Relay and listener metrics appear once Attach is
// called. logger may be nil; Metrics logs to logger.Named("metrics"). It
// returns cfg's validation error, or an error if db is nil.
func New(cfg Config, db DB, logger *zap.Logger) (*Metrics, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if db == nil {
		return nil, errors.New("metrics: db is nil")
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	st, err := newStatements(cfg)
	if err != nil {
		return nil, err
	}
	m := &Metrics{
		cfg:        cfg,
		db:         db,
		log:        logger.Named("metrics"),
		reg:        prometheus.NewRegistry(),
		statements: st,
	}
	m.oview.poke = make(chan struct{}, 1)
	ageNow := func(pick func(*oldestSnapshot) float64) func() float64 {
		return func() float64 {
			if o := m.oldest.Load(); o != nil {
				return o.age(pick(o), time.Now())
			}
			return 0
		}
	}
	oldestAge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "outbox_oldest_unpublished_age_seconds",
		Help: "Age, when scraped, of the lowest-seq unpublished event that is not dead-lettered (database clock: created_at is the inserting transaction's start); 0 when there is none. Which event is oldest is refreshed every --metrics-interval; its age grows between refreshes.",
	}, ageNow(func(o *oldestSnapshot) float64 { return o.unpublished }))
	oldestClaimableAge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "outbox_oldest_claimable_age_seconds",
		Help: "Age, when scraped, of the lowest-seq claimable event: unpublished, not dead-lettered, not leased or backing off, not held behind an earlier event of its aggregate that is backing off or dead-lettered (one behind an event a relay leased is claimable: the relay owning the aggregate claims it next); 0 when there is none. A relay that keeps up keeps it near 0.",
	}, ageNow(func(o *oldestSnapshot) float64 { return o.claimable }))
	ownedClaimableAge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "outbox_relay_oldest_claimable_age_seconds",
		Help: "Age of the lowest-seq claimable event in the key partitions this relay owns (read every --metrics-interval, growing between reads); 0 when there is none. The table-wide outbox_oldest_claimable_age_seconds is the oldest of all relays': this one says which relay falls behind.",
	}, func() float64 {
		age := m.ownedAge.Load()
		if age == 0 {
			return 0
		}
		return (time.Duration(age) + time.Since(time.Unix(0, m.ownedAt.Load()))).Seconds()
	})
	oldestCreated := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "outbox_oldest_unpublished_created_timestamp_seconds",
		Help: "Unix time (database clock) of the lowest-seq unpublished event that is not dead-lettered, as of the last refresh; 0 when there is none.",
	}, func() float64 {
		if o := m.oldest.Load(); o != nil {
			return o.unpublished
		}
		return 0
	})
	m.unpublished = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "outbox_unpublished_events",
		Help: "Unpublished events that are not dead-lettered (claimable, leased or backing off). Refreshed every --metrics-interval.",
	})
	m.deadLetters = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "outbox_dead_letter_events",
		Help: "Dead-lettered events waiting for `outbox-relay requeue`. Refreshed every --metrics-interval.",
	})
	m.refreshErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "outbox_table_stats_errors_total",
		Help: "Failed refreshes of the outbox_* table gauges (they keep their last value).",
	})
	m.lastRefresh = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "outbox_table_stats_last_success_timestamp_seconds",
		Help: "Unix time of the last successful full refresh of the table gauges (their counts included), every --metrics-interval.",
	})
	m.published = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outbox_published_events_total",
		Help: "Events acknowledged by Kafka, by topic.",
	}, []string{"topic"})
	m.latency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "outbox_publish_latency_seconds",
		Help:    "Time from the inserting transaction's start (created_at, database clock) to Kafka's acknowledgement (relay host clock).",
		Buckets: LatencyBuckets,
	})
	m.publishErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outbox_publish_errors_total",
		Help: "Events whose publish failed, by topic and reason (produce.ErrorReason: unreachable, message_too_large, not_leader, ...), and whether they were dead-lettered.",
	}, []string{"topic", "reason", "dead_lettered"})
	m.claimDur = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "outbox_claim_duration_seconds",
		Help:    "Duration of a claim (one round trip: lease a batch and commit), by result: rows, empty or error.",
		Buckets: StatementBuckets,
	}, []string{"result"})
	m.batchSize = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "outbox_claim_batch_size",
		Help:    "Events leased by a claim that found any.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 14),
	})
	m.markDur = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "outbox_mark_duration_seconds",
		Help:    "Duration of marking a published chunk of events.",
		Buckets: StatementBuckets,
	})
	m.takeovers = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "outbox_lease_takeovers_total",
		Help: "Events claimed after their previous lease expired unmarked and unreleased (a relay died or stalled).",
	})
	m.leaseLost = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "outbox_lease_lost_total",
		Help: "Published events this relay could not mark because its lease had passed to another claim (they are published again).",
	})
	m.markErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "outbox_mark_errors_total",
		Help: "Failed mark statements (retried; events are published again if the lease ends first).",
	})
	m.tableChecks = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "outbox_table_checks_total",
		Help: "Checks of the outbox table run (every --metrics-interval: UNLOGGED, the seq sequence behind the table, replication slots), failed ones included.",
	})
	m.reg.MustRegister(m.tableChecks, slotCollector{m})
	m.reg.MustRegister(m.publishErrors, m.claimDur, m.batchSize, m.markDur, m.takeovers, m.leaseLost, m.markErrors)
	m.reg.MustRegister(m.snapshotGauge())
	m.reg.MustRegister(m.partitionGauges()...)
	m.kafka = newKafkaMetrics(m.reg)
	m.reg.MustRegister(oldestAge, oldestClaimableAge, ownedClaimableAge, oldestCreated, m.unpublished, m.deadLetters, m.refreshErrors, m.lastRefresh, m.published, m.latency,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&componentCollector{m: m})
	return m, nil
}

// Registry returns the Metrics' own registry, for extra collectors (for
// example the retention cleaner's counters).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Attach makes the running relay's parts known: from now on their
// counters are exported and readiness checks them. Safe to call
// concurrently with scrapes; a later call replaces the earlier one.
func (m *Metrics) Attach(c Components) {
	m.comps.Store(&c)
	m.readyMu.Lock()
	m.readyAt = time.Time{} // re-check at the next probe
	m.readyMu.Unlock()
}

// SetStopping makes readiness fail with "stopping" from now on (the
// process is shutting down).
func (m *Metrics) SetStopping() { m.stopping.Store(true) }

// Published records rows that Kafka acknowledged (relay.Observer): it adds
// them to outbox_published_events_total by topic (rows with no topic count
// under Config.DefaultTopic), observes now - CreatedAt for each into
// outbox_publish_latency_seconds, and drops them from the age gauges'
// view at once (see oldest.go: the gauges do not wait for the next
// refresh). It is cheap and never blocks.
func (m *Metrics) Published(rows []claim.Row) {
	if len(rows) == 0 {
		return
	}
	now := time.Now()
	var maxSeq int64
	for i := range rows {
		maxSeq = max(maxSeq, rows[i].Seq)
	}
	m.tcheck.noteSeqs(maxSeq)
	m.notePublished(rows)
	topic, n := "", 0
	flush := func() {
		if n > 0 {
			m.published.WithLabelValues(topic).Add(float64(n))
		}
	}
	for i := range rows {
		t := rows[i].Topic
		if t == "" {
			t = m.cfg.DefaultTopic
		}
		if t != topic {
			flush()
			topic, n = t, 0
		}
		n++
		m.latency.Observe(now.Sub(rows[i].CreatedAt).Seconds())
	}
	flush()
}

// Claimed records one claim (relay.Observer).
func (m *Metrics) Claimed(d time.Duration, rows, takenOver int, err error) {
	switch {
	case err != nil:
		m.claimDur.WithLabelValues("error").Observe(d.Seconds())
	case rows == 0:
		m.claimDur.WithLabelValues("empty").Observe(d.Seconds())
	default:
		m.claimDur.WithLabelValues("rows").Observe(d.Seconds())
		m.batchSize.Observe(float64(rows))
	}
	if takenOver > 0 {
		m.takeovers.Add(float64(takenOver))
	}
}

// Marked records one mark (relay.Observer).
func (m *Metrics) Marked(d time.Duration, ids int, marked int64, err error) {
	if err != nil {
		m.markErrors.Inc()
		return
	}
	m.markDur.Observe(d.Seconds())
	if lost := int64(ids) - marked; lost > 0 {
		m.leaseLost.Add(float64(lost))
	}
}

// PublishFailed records one failed event (relay.Observer).
func (m *Metrics) PublishFailed(_ claim.Row, topic string, err error, deadLettered bool) {
	m.publishErrors.WithLabelValues(topic, produce.ErrorReason(err), strconv.FormatBool(deadLettered)).Inc()
}

// oldestSnapshot is one refresh's view of the oldest events: their
// created_at and the database's now(), as Unix seconds, and this host's
// clock at the refresh. An age when scraped is the database's now() at the
// refresh, plus the time elapsed since by this host's monotonic clock,
// minus created_at: correct however far the two clocks are apart.
type oldestSnapshot struct {
	dbNow, unpublished, claimable float64 // 0: no such event
	at                            time.Time
	// head are the lowest-seq live unpublished rows the refresh saw, by
	// seq, less those published since (oldest.go); complete is true when
	// they were all of them, lastSeen the created_at of the last one it
	// saw. claimableSeq is the claimable row's seq (0: none, or published
	// since).
	head         []headRow
	complete     bool
	lastSeen     float64
	claimableSeq int64
}

func (o *oldestSnapshot) age(created float64, now time.Time) float64 {
	if created == 0 {
		return 0
	}
	return max(0, o.dbNow+now.Sub(o.at).Seconds()-created)
}

// TableStats are the values behind the table gauges.
type TableStats struct {
	// OldestUnpublishedAge is the age of the lowest-seq unpublished, not
	// dead-lettered event (database clock); 0 when there is none.
	OldestUnpublishedAge time.Duration
	// OwnedOldestClaimableAge is the age of the lowest-seq claimable
	// event of the key partitions the attached relay owns (see
	// outbox_relay_oldest_claimable_age_seconds); 0 when there is none or
	// no relay is attached.
	OwnedOldestClaimableAge time.Duration
	// OldestClaimableAge is the age of the lowest-seq claimable event (see
	// outbox_oldest_claimable_age_seconds); 0 when there is none.
	OldestClaimableAge time.Duration
	// Unpublished counts unpublished events that are not dead-lettered.
	Unpublished int64
	// DeadLetters counts dead-lettered events.
	DeadLetters int64
}

// Refresh recomputes the table gauges now, bounded by Config.QueryTimeout,
// and returns the values. On error the gauges keep their last values and
// outbox_table_stats_errors_total is incremented; the error is wrapped as
// "metrics: table stats: ...".
func (m *Metrics) Refresh(ctx context.Context) (TableStats, error) {
	return m.refresh(ctx, true)
}

// refresh is Refresh; without counts it reads the ages only (agesSQL), and
// the count gauges, and TableStats's Unpublished and DeadLetters, keep
// their last values.
func (m *Metrics) refresh(ctx context.Context, counts bool) (TableStats, error) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.QueryTimeout)
	defer cancel()
	var s TableStats
	var row tableStatsRow
	// The batch opens with the session settings (SessionSettings:
	// the index plans whatever the statistics say, and the statement
	// timeout), for the statements' own transaction.
	b := &pgx.Batch{}
	b.Queue(m.settings.SQL)
	if counts {
		b.Queue(m.statsSQL)
	} else {
		b.Queue(m.agesSQL)
	}
	member := ""
	if c := m.comps.Load(); c != nil && c.Relay != nil {
		member = c.Relay.Stats().Member
	}
	if member != "" {
		b.Queue(m.owned.SQL, m.owned.Args(ownedArgs{Member: member})...)
	}
	br := m.db.SendBatch(ctx, b)
	_, err := br.Exec()
	if err == nil {
		row, err = batchOne[tableStatsRow](br)
		if row.Unpublished != nil && row.DeadLetters != nil {
			s.Unpublished, s.DeadLetters = *row.Unpublished, *row.DeadLetters
			m.counts.Store(&[2]int64{s.Unpublished, s.DeadLetters})
		} else if c := m.counts.Load(); c != nil {
			s.Unpublished, s.DeadLetters = c[0], c[1]
		}
	}
	if err == nil && member != "" {
		var age float64
		switch err = br.QueryRow().Scan(&age); {
		case errors.Is(err, pgx.ErrNoRows):
			age, err = 0, nil
			fallthrough
		case err == nil:
			s.OwnedOldestClaimableAge = time.Duration(age * float64(time.Second))
			m.ownedAge.Store(int64(s.OwnedOldestClaimableAge))
			m.ownedAt.Store(time.Now().UnixNano())
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		m.refreshErrors.Inc()
		return TableStats{}, fmt.Errorf("metrics: table stats: %w", err)
	}
	// The refresh saw every live row when the head is not full (or, with
	// the counts, when they say so).
	complete := len(row.HeadSeqs) < headRows
	if counts {
		complete = s.Unpublished <= int64(len(row.HeadSeqs))
	}
	snap := &oldestSnapshot{dbNow: row.DBNow, at: time.Now(), complete: complete}
	for i := range row.HeadSeqs {
		snap.head = append(snap.head, headRow{seq: row.HeadSeqs[i], created: row.HeadCreated[i]})
	}
	if len(snap.head) > 0 {
		snap.lastSeen = snap.head[len(snap.head)-1].created
	}
	if row.ClaimableCreated != nil && row.ClaimableSeq != nil {
		snap.claimable, snap.claimableSeq = *row.ClaimableCreated, *row.ClaimableSeq
	}
	m.storeOldest(snap)
	snap = m.oldest.Load()
	s.OldestUnpublishedAge = time.Duration(snap.age(snap.unpublished, snap.at) * float64(time.Second))
	s.OldestClaimableAge = time.Duration(snap.age(snap.claimable, snap.at) * float64(time.Second))
	m.unpublished.Set(float64(s.Unpublished))
	m.deadLetters.Set(float64(s.DeadLetters))
	if counts {
		m.lastRefresh.SetToCurrentTime()
	}
	return s, nil
}

// StatsSQL returns the statement behind the table gauges (for EXPLAIN).
func (m *Metrics) StatsSQL() string { return m.statsSQL }

// refreshDutyCycle bounds the share of one database backend the table
// gauges may use: after a refresh that took d, the next one starts no
// sooner than refreshDutyCycle*d later. The count of unpublished events is
// a scan of the unpublished index (with 10M unpublished rows a refresh took
// 1.4 s on a 2-core machine), so a huge backlog slows the gauges' counts
// down instead of loading the database while it drains. The ages are
// computed at scrape time and stay exact.
const refreshDutyCycle = 20

// refreshWait returns how long RunRefresher waits after a refresh that
// took took: interval, or refreshDutyCycle times took when that is longer.
func refreshWait(interval, took time.Duration) time.Duration {
	if w := refreshDutyCycle * took; w > interval {
		return w
	}
	return interval
}

// RunRefresher refreshes the table gauges at once and then every
// Config.Interval until ctx is done; it returns nil then. A refresh that
// takes longer than Config.Interval/20 spaces the next one out to 20 times
// its duration (at most 5% of one database backend). When the relay has
// published every old row the last refresh saw and there were more
// (Published), it refreshes the gauges early, no sooner than 100ms and 20
// times the last refresh's duration after it. Failures are logged
// once when they start and once when they end, not on every interval. At
// its start it logs once when the role cannot see other roles'
// transactions (no pg_read_all_stats): the held-snapshot watch is blind to
// them.
func (m *Metrics) RunRefresher(ctx context.Context) error {
	t := time.NewTimer(m.cfg.Interval)
	defer t.Stop()
	m.checkSnapshotVisibility(ctx)
	var nextFull time.Time
	for {
		start := time.Now()
		// A refresh Published asked for (see oldest.go) reads the ages
		// only; the counts, the snapshot watch and the table check keep
		// their interval.
		full := !start.Before(nextFull)
		_, err := m.refresh(ctx, full)
		if err == nil && full {
			sctx, cancel := context.WithTimeout(ctx, m.cfg.QueryTimeout)
			_, err = m.OldestSnapshot(sctx)
			cancel()
		}
		if err == nil && full {
			_, err = m.CheckTable(ctx)
		}
		switch {
		case err != nil && ctx.Err() == nil:
			if !m.refreshFailing.Swap(true) {
				m.log.Warn("table stats failed; gauges keep their last values", zap.Error(err), zap.String("table", m.cfg.Table))
			}
		case err == nil:
			if m.refreshFailing.Swap(false) {
				m.log.Info("table stats work again", zap.String("table", m.cfg.Table))
			}
		}
		took := time.Since(start)
		if full {
			nextFull = start.Add(refreshWait(m.cfg.Interval, took))
		}
		earliest := start.Add(max(minRefreshGap, refreshDutyCycle*took))
		t.Reset(time.Until(nextFull))
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-m.oview.poke:
			if d := time.Until(earliest); d > 0 {
				t.Reset(d)
				select {
				case <-ctx.Done():
					return nil
				case <-t.C:
				}
			}
		}
	}
}

// componentCollector exports the attached components' cumulative counters
// at scrape time.
type componentCollector struct{ m *Metrics }

var (
	descMarked       = prometheus.NewDesc("outbox_relay_marked_total", "Events marked published in the table; fewer than published when a lease was lost before the mark.", nil, nil)
	descFailed       = prometheus.NewDesc("outbox_relay_publish_failures_total", "Failed publishes of an event (broker errors and outages), each retried or dead-lettered.", nil, nil)
	descDead         = prometheus.NewDesc("outbox_relay_dead_lettered_total", "Events dead-lettered by this relay.", nil, nil)
	descHeldBack     = prometheus.NewDesc("outbox_relay_held_back_total", "Events given back unpublished because an earlier event of their aggregate had not been published first (relay.Stats.HeldBack).", nil, nil)
	descReleased     = prometheus.NewDesc("outbox_relay_released_total", "Events given back unpublished (retries, held-back events, shutdown).", nil, nil)
	descClaims       = prometheus.NewDesc("outbox_relay_claims_total", "Claim statements run (polls, empty or not, including failed ones).", nil, nil)
	descEmptyClaims  = prometheus.NewDesc("outbox_relay_empty_claims_total", "Claim statements that found no claimable event.", nil, nil)
	descWakeups      = prometheus.NewDesc("outbox_relay_wakeups_total", "Reasons the relay claimed: notify (a NOTIFY), poll (--poll-interval), window (claims in the claim window after a non-empty one), backlog (a full batch or start-up).", []string{"cause"}, nil)
	descConnected    = prometheus.NewDesc("outbox_listener_connected", "1 while the LISTEN connection is established, else 0. Absent when the relay runs poll-only.", nil, nil)
	descNotes        = prometheus.NewDesc("outbox_notifications_received_total", "Notifications received on the LISTEN channel (watchdog pings excluded).", nil, nil)
	descIgnored      = prometheus.NewDesc("outbox_notifications_ignored_total", "Notifications that named only key partitions other relays own, and so did not wake this one.", nil, nil)
	descReconnects   = prometheus.NewDesc("outbox_listener_reconnects_total", "Times the listener (re)established LISTEN, the first time included.", nil, nil)
	descRelayRunning = prometheus.NewDesc("outbox_relay_up", "1 once the relay runs (after the start-up wait for the database and the broker), else 0.", nil, nil)
	descStalled      = prometheus.NewDesc("outbox_relay_stalled", "1 while the relay moves no events: a step (label) made no progress for --stall-timeout (relay.Health), else 0 (and step=\"\").", []string{"step"}, nil)
	descFailStreak   = prometheus.NewDesc("outbox_relay_consecutive_failures", "Claims or marks (label step) that failed in a row; 0 after a success.", []string{"step"}, nil)
	descPubStalled   = prometheus.NewDesc("outbox_relay_publish_stalled_seconds", "How long events have been claimed without any of them being published or dead-lettered; 0 when none waits.", nil, nil)
	descOwned        = prometheus.NewDesc("outbox_relay_owned_partitions", "Key partitions this relay owns now (it claims rows of those only); the table has outbox_relay_key_partitions of them.", nil, nil)
	descPartitions   = prometheus.NewDesc("outbox_relay_key_partitions", "The table's number of key partitions.", nil, nil)
	descMembers      = prometheus.NewDesc("outbox_relay_relays", "Relays running on the table, as this relay saw at its last rebalance.", nil, nil)
	descAcquired     = prometheus.NewDesc("outbox_relay_partitions_acquired_total", "Key partitions this relay acquired.", nil, nil)
	descGivenBack    = prometheus.NewDesc("outbox_relay_partitions_released_total", "Key partitions this relay gave back (to a relay that joined, or at shutdown).", nil, nil)
	descRegRequests  = prometheus.NewDesc("outbox_schema_registry_requests_total", "Schema lookups sent to the Schema Registry (cache misses, references and background refreshes).", nil, nil)
	descSchemaHits   = prometheus.NewDesc("outbox_schema_cache_hits_total", "Events encoded with a schema from the cache.", nil, nil)
	descSchemaFaults = prometheus.NewDesc("outbox_schema_faults_total", "Events that did not fit their schema (dead-lettered, named in last_error).", nil, nil)
	descHandovers    = prometheus.NewDesc("outbox_relay_partition_handovers_total", "Key partitions this relay took over from a relay whose membership had run out (it died, was paused or lost the database); partitions a relay gave back (on SIGTERM, or to rebalance) are acquired free and count in outbox_relay_partitions_acquired_total only.", nil, nil)
)

func (c *componentCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descMarked, descFailed, descDead, descHeldBack, descReleased,
		descClaims, descEmptyClaims, descWakeups, descConnected, descNotes, descIgnored, descReconnects, descRelayRunning,
		descStalled, descFailStreak, descPubStalled, descOwned, descPartitions, descMembers, descAcquired, descGivenBack, descHandovers,
		descRegRequests, descSchemaHits, descSchemaFaults} {
		ch <- d
	}
}

func (c *componentCollector) Collect(ch chan<- prometheus.Metric) {
	comps := c.m.comps.Load()
	if comps == nil || comps.Relay == nil {
		ch <- prometheus.MustNewConstMetric(descRelayRunning, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(descRelayRunning, prometheus.GaugeValue, 1)
	s := comps.Relay.Stats()
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(descMarked, s.Marked)
	counter(descFailed, s.Failed)
	counter(descDead, s.DeadLettered)
	counter(descHeldBack, s.HeldBack)
	counter(descReleased, s.Released)
	counter(descClaims, s.Claims)
	counter(descEmptyClaims, s.EmptyClaims)
	counter(descWakeups, s.WakeNotify, "notify")
	counter(descWakeups, s.WakePoll, "poll")
	counter(descWakeups, s.WakeWindow, "window")
	counter(descWakeups, s.WakeBacklog, "backlog")
	ch <- prometheus.MustNewConstMetric(descOwned, prometheus.GaugeValue, float64(s.OwnedPartitions))
	ch <- prometheus.MustNewConstMetric(descPartitions, prometheus.GaugeValue, float64(s.Partitions))
	ch <- prometheus.MustNewConstMetric(descMembers, prometheus.GaugeValue, float64(s.Relays))
	counter(descAcquired, s.PartitionsAcquired)
	counter(descGivenBack, s.PartitionsReleased)
	counter(descHandovers, s.Handovers)
	h := comps.Relay.Health()
	stalled := 0.0
	if !h.Moving {
		stalled = 1
	}
	ch <- prometheus.MustNewConstMetric(descStalled, prometheus.GaugeValue, stalled, h.Step)
	ch <- prometheus.MustNewConstMetric(descFailStreak, prometheus.GaugeValue, float64(h.ClaimFailures), "claim")
	ch <- prometheus.MustNewConstMetric(descFailStreak, prometheus.GaugeValue, float64(h.MarkFailures), "mark")
	ch <- prometheus.MustNewConstMetric(descPubStalled, prometheus.GaugeValue, h.PublishStalledFor.Seconds())
	if l := comps.Listener; l != nil {
		connected := 0.0
		if l.State() == listen.StateListening {
			connected = 1
		}
		ch <- prometheus.MustNewConstMetric(descConnected, prometheus.GaugeValue, connected)
		counter(descNotes, l.Notifications())
		counter(descIgnored, l.Ignored())
		counter(descReconnects, l.Reconnects())
	}
	if r := comps.Registry; r != nil {
		requests, hits, faults := r.Stats()
		counter(descRegRequests, requests)
		counter(descSchemaHits, hits)
		counter(descSchemaFaults, faults)
	}
}

func isNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }

// queryOne runs a statement that returns one row and reads it into a T by
// column name (pgx.RowToStructByName: T's fields are tagged
// `db:"column"`; a column without a field, or a field without a column,
// is an error). No row is pgx.ErrNoRows, as from QueryRow.
func queryOne[T any](ctx context.Context, db DB, sql string, args ...any) (T, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		var zero T
		return zero, err
	}
	return pgx.CollectOneRow(rows, pgx.RowToStructByName[T])
}

// batchOne reads br's next result, one row, into a T by column name, as
// queryOne does.
func batchOne[T any](br pgx.BatchResults) (T, error) {
	rows, err := br.Query()
	if err != nil {
		var zero T
		return zero, err
	}
	return pgx.CollectOneRow(rows, pgx.RowToStructByName[T])
}

// tableStatsRow is the row of TableStats; the counts are NULL from
// NoCounts.
type tableStatsRow struct {
	DBNow            float64   `db:"db_now"`
	HeadSeqs         []int64   `db:"head_seqs"`
	HeadCreated      []float64 `db:"head_created"`
	ClaimableSeq     *int64    `db:"claimable_seq"`
	ClaimableCreated *float64  `db:"claimable_created"`
	Unpublished      *int64    `db:"unpublished"`
	DeadLetters      *int64    `db:"dead_letters"`
}
