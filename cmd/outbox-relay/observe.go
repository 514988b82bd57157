package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/metrics"
	"github.com/pgoutbox/outbox/internal/retention"
	"github.com/pgoutbox/outbox/internal/sqladmin"
	"github.com/pgoutbox/outbox/relay"
)

// observeFlags are run's flags for the metrics server and the retention
// cleaner.
type observeFlags struct {
	metricsAddr       string
	metricsInterval   time.Duration
	readyMaxAge       time.Duration
	snapshotWarnAfter time.Duration
	retention         time.Duration
	retentionBatch    int
	retentionInterval time.Duration
	dropPartitions    bool
}

func (o *observeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&o.metricsAddr, "metrics-addr", metrics.DefaultAddr,
		"listen address, [host]:port, of the HTTP server for /metrics, /healthz and /readyz; an address in use stops the relay at start (exit 2): several relays on one host need one port each; --metrics-addr '' turns it off (an empty OUTBOX_METRICS_ADDR is ignored like every empty variable)")
	fs.DurationVar(&o.metricsInterval, "metrics-interval", metrics.DefaultInterval,
		"how often the outbox_* table gauges (oldest unpublished age, counts) are computed from SQL")
	fs.DurationVar(&o.snapshotWarnAfter, "snapshot-warn-after", metrics.DefaultSnapshotWarnAfter,
		"warn (every 5m, naming its pid and application_name) while a transaction in the database has held a snapshot this long: VACUUM cannot clean the outbox table meanwhile (negative: off)")
	fs.DurationVar(&o.readyMaxAge, "ready-max-age", 0,
		"/readyz fails while the oldest claimable event (unpublished, not leased, not backing off, not behind an earlier event of its aggregate) is older than this (0: off)")
	fs.DurationVar(&o.retention, "retention", retention.DefaultRetention,
		"delete published rows this long after they were published (0: right after publishing; negative: never delete)")
	fs.IntVar(&o.retentionBatch, "retention-batch", retention.DefaultBatchSize,
		fmt.Sprintf("most rows one retention DELETE removes (1..%d)", retention.MaxBatchSize))
	fs.DurationVar(&o.retentionInterval, "retention-interval", 0,
		"time between retention passes (0: 1m, or 1s with --retention=0)")
	fs.BoolVar(&o.dropPartitions, "retention-drop-partitions", false,
		"on a time-partitioned table (migrate --time-partitioned): drop each whole partition once every row in it was published longer than --retention ago, instead of deleting rows; a partition holding an unpublished row or a dead letter is kept (the role must own the table)")
}

// retentionConfig returns the cleaner's configuration; ok is false when
// retention is off (--retention negative).
func (o *observeFlags) retentionConfig(table string) (cfg retention.Config, ok bool) {
	if o.retention < 0 {
		return retention.Config{}, false
	}
	return retention.Config{Table: table, Retention: o.retention, BatchSize: o.retentionBatch, Interval: o.retentionInterval,
		DropPartitions: o.dropPartitions}, true
}

var observeConfigFlags = map[string]string{
	"metrics.Interval": "--metrics-interval", "metrics.Table": "--table", "metrics.ReadyMaxAge": "--ready-max-age",
	"retention.Retention": "--retention", "retention.BatchSize": "--retention-batch",
	"retention.Interval": "--retention-interval", "retention.Table": "--table",
}

// validate checks the flags, naming the flag at fault (exit code 2).
func (o *observeFlags) validate(table string) error {
	mcfg := metrics.Config{Table: table, Interval: o.metricsInterval}
	errs := []error{mcfg.Validate()}
	if o.metricsAddr != "" {
		if _, port, err := net.SplitHostPort(o.metricsAddr); err != nil || port == "" {
			return usagef("--metrics-addr: %q is not [host]:port (empty disables the server)", o.metricsAddr)
		}
	}
	if o.retentionBatch < 1 {
		return usagef("--retention-batch: must be 1..%d, got %d", retention.MaxBatchSize, o.retentionBatch)
	}
	if o.dropPartitions && o.retention < 0 {
		return usagef("--retention-drop-partitions: needs retention on (--retention is negative)")
	}
	if o.retentionInterval < 0 {
		return usagef("--retention-interval: must not be negative, got %s", o.retentionInterval)
	}
	if rcfg, ok := o.retentionConfig(table); ok {
		errs = append(errs, rcfg.Validate())
	}
	for _, err := range errs {
		if err == nil {
			continue
		}
		var fe *outbox.FieldError
		if errors.As(err, &fe) {
			if fl, ok := observeConfigFlags[fe.Component+"."+fe.Field]; ok {
				return usagef("%s: %s", fl, fe.Reason)
			}
		}
		return usageError{err}
	}
	return nil
}

// checkTable refuses the flags that do not fit the table and cannot get
// better by waiting (exit 2): --retention-drop-partitions on a table that
// is not partitioned, whose every retention pass would fail.
func (o *observeFlags) checkTable(ctx context.Context, pool *pgxpool.Pool, table string) error {
	if !o.dropPartitions || o.retention < 0 {
		return nil
	}
	partitioned, err := sqladmin.IsPartitioned(ctx, pool, table)
	if err != nil {
		return fmt.Errorf("check outbox table %q: %w", table, err)
	}
	if !partitioned {
		return usagef("--retention-drop-partitions: table %s is not partitioned: the flag drops whole partitions of a time-partitioned table (outbox-relay migrate --time-partitioned creates one; a plain table cannot be converted); leave the flag out, and retention deletes published rows in batches", table)
	}
	return nil
}

// observer runs the metrics server and the retention cleaner beside the
// relay.
type observer struct {
	flags *observeFlags
	table string
	pool  *pgxpool.Pool
	log   *zap.Logger
	m     *metrics.Metrics

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startObserve starts the table gauges and, with --metrics-addr, the HTTP
// server, before the start-up wait, so /healthz answers (and /readyz says
// what is missing) while the relay waits for the database and the broker.
// A server that cannot listen (the address is in use, say by another relay
// on the host) is a usage error naming the flag and the address: a relay
// whose health endpoints are missing would look dead to its orchestrator,
// or be silently unmonitored. An empty --metrics-addr turns the server off
// on purpose. Call stop when run ends; ctx's end makes /readyz fail
// ("stopping") while the relay drains.
func startObserve(ctx context.Context, o *observeFlags, pool *pgxpool.Pool, table, aggregateColumn, topic string, log *zap.Logger) (*observer, error) {
	m, err := metrics.New(metrics.Config{Table: table, AggregateColumn: aggregateColumn, DefaultTopic: topic, Topics: []string{topic},
		Interval: o.metricsInterval, ReadyMaxAge: o.readyMaxAge, SnapshotWarnAfter: o.snapshotWarnAfter}, pool, log)
	if err != nil {
		return nil, usageError{err}
	}
	var ln net.Listener
	if o.metricsAddr != "" {
		if ln, err = net.Listen("tcp", o.metricsAddr); err != nil {
			return nil, listenError(o.metricsAddr, err)
		}
	} else {
		log.Info("metrics server off (--metrics-addr is empty): no /metrics, /healthz or /readyz")
	}
	ob := &observer{flags: o, table: table, pool: pool, log: log, m: m}
	ob.ctx, ob.cancel = context.WithCancel(context.WithoutCancel(ctx))
	context.AfterFunc(ctx, m.SetStopping)
	if ln != nil {
		ob.wg.Add(1)
		go func() {
			defer ob.wg.Done()
			if err := m.Serve(ob.ctx, ln); err != nil {
				log.Error("metrics server failed", zap.Error(err))
			}
		}()
	}
	return ob, nil
}

// listenError is the usage error for a --metrics-addr the relay cannot
// listen on: "--metrics-addr :9090: address already in use".
func listenError(addr string, err error) error {
	reason := err.Error()
	var se *os.SyscallError
	if errors.As(err, &se) {
		reason = se.Err.Error()
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		return usagef("--metrics-addr %s: %s (another relay on this host? give each its own --metrics-addr, or --metrics-addr '' to run without the metrics server)", addr, reason)
	}
	return usagef("--metrics-addr %s: %s", addr, reason)
}

// attach hands the running relay's parts to the metrics (relay counters,
// listener state, broker readiness; the relay's OnPublished feeds the
// per-topic counter and the latency histogram) and starts the table gauges
// and the retention cleaner. listener is nil with --no-notify. Call it
// before r.Run.
func (ob *observer) attach(svc *relay.Service) error {
	comps := metrics.Components{Relay: svc.Relay(), Broker: svc.Publisher()}
	if l := svc.Listener(); l != nil {
		comps.Listener = l
	}
	if r := svc.Registry(); r != nil {
		comps.Registry = r
	}
	ob.m.Attach(comps)
	ob.wg.Add(1)
	go func() {
		defer ob.wg.Done()
		_ = ob.m.RunRefresher(ob.ctx)
	}()
	ob.wg.Add(1)
	go func() {
		defer ob.wg.Done()
		keepTimePartitions(ob.ctx, ob.pool, ob.table, timePartitionsEvery, ob.log, ob.m.SetTimePartitions)
	}()
	rcfg, ok := ob.flags.retentionConfig(ob.table)
	if !ok {
		ob.log.Info("retention off: published rows are kept (--retention negative)")
		return nil
	}
	c, err := retention.New(rcfg, ob.pool, ob.log)
	if err != nil {
		return usageError{err}
	}
	ob.m.Registry().MustRegister(metrics.Retention(c.Stats)...)
	ob.wg.Add(1)
	go func() {
		defer ob.wg.Done()
		_ = c.Run(ob.ctx)
	}()
	return nil
}

// stop stops the cleaner, the table gauges and the metrics server, and
// waits for them.
func (ob *observer) stop() {
	ob.cancel()
	ob.wg.Wait()
}

// timePartitionsEvery is how often a relay makes sure that the coming
// partitions of a time-partitioned table exist: far more often than the
// shortest interval (outboxsql.MinTimePartitionInterval) and the partitions
// created ahead require, so that a relay restarted or several relays
// missing a round change nothing.
const timePartitionsEvery = 10 * time.Minute

// keepTimePartitions runs sqladmin.EnsureTimePartitions at once and then
// every `every` until ctx ends. A table whose time partitions pgoutbox
// does not keep (a plain table; a partitioned table without
// migrate --time-partitioned) costs one query a round. A failure (the
// role does not own the table, a lock not free within 5s) is logged, at
// warn level, once until a round succeeds again. report is told each
// round's outcome (the metrics' "partitions" readiness check).
func keepTimePartitions(ctx context.Context, pool *pgxpool.Pool, table string, every time.Duration, log *zap.Logger, report func(error)) {
	log = log.Named("partitions")
	t := time.NewTicker(every)
	defer t.Stop()
	failing := false
	for {
		created, err := sqladmin.EnsureTimePartitions(ctx, pool, table)
		if ctx.Err() == nil {
			report(err)
		}
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			if len(created) > 0 {
				log.Info("created time partitions", zap.Strings("partitions", created))
			}
			if !failing {
				log.Warn("could not create the coming time partitions; retrying", zap.Error(err), zap.Duration("retry_in", every))
			}
			failing = true
		default:
			if failing {
				log.Info("time partitions are created again")
			}
			failing = false
			if len(created) > 0 {
				log.Info("created time partitions", zap.Strings("partitions", created))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
