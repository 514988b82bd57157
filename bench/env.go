package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox/internal/faultnet"
	"github.com/pgoutbox/outbox/internal/pgtemp"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

// Env is where benchmarks run: one Postgres and one Kafka cluster. Every
// run creates its own schema (with a fresh outbox table) and its own topic
// in them, and drops the schema afterwards.
type Env struct {
	// DSN is the PostgreSQL URL or keyword/value DSN. Required. Its
	// search_path, if any, is replaced per run.
	DSN string
	// Brokers are Kafka bootstrap brokers, host:port. Required.
	Brokers []string
	// Partitions is the partition count of each run's topic. Defaults to 1.
	Partitions int32
	// Log receives the benchmark's and the relay's logs. Defaults to a
	// no-op logger.
	Log *zap.Logger
	// Progress, if set, receives a progress line every few seconds.
	Progress *Progress
	// Broker describes the broker in the report ("kfake" or "external").
	// Defaults to "external".
	Broker string
	// RelayBin is the outbox-relay binary that the subprocess modes (drain
	// notify-proc, broker-down) run; see BuildRelay.
	RelayBin string
	// SetBrokerUp, if set, makes the broker reachable (true) or refuse
	// every connection (false); the broker-down scenario needs it
	// (Local.SetBrokerUp for the in-process broker).
	SetBrokerUp func(up bool)
}

func (e *Env) validate() error {
	if e.DSN == "" {
		return errors.New("bench: Env.DSN: required")
	}
	if len(e.Brokers) == 0 {
		return errors.New("bench: Env.Brokers: required")
	}
	if e.Partitions == 0 {
		e.Partitions = 1
	}
	if e.Partitions < 0 {
		return fmt.Errorf("bench: Env.Partitions: must be positive, got %d", e.Partitions)
	}
	if e.Log == nil {
		e.Log = zap.NewNop()
	}
	if e.Broker == "" {
		e.Broker = "external"
	}
	return nil
}

// Local is a throwaway Postgres (fsync on) and an in-process kfake broker,
// the development stack of `make run`.
type Local struct {
	// DSN connects to the throwaway cluster's "postgres" database.
	DSN string
	// Brokers is the kfake broker's address (127.0.0.1, random port).
	Brokers []string
	pg      *pgtemp.Cluster
	kafka   *kfake.Cluster
	ln      *faultnet.Listener
}

// StartLocal starts what is missing: a pgtemp cluster with fsync on (the
// realistic setting) when dsn is empty, a one-broker kfake cluster when
// brokers is empty. Close stops what it started. The throwaway cluster
// spaces checkpoints out (max_wal_size 8GB, checkpoint_timeout 30min):
// the suite writes about a million rows, and a checkpoint landing in one
// mode's run by chance would skew the comparison between modes.
func StartLocal(ctx context.Context, dsn string, brokers []string) (*Local, error) {
	l := &Local{DSN: dsn, Brokers: brokers}
	if dsn == "" {
		c, err := pgtemp.Start(ctx, pgtemp.Options{Fsync: true, ExtraConf: map[string]string{
			"max_wal_size": "8GB", "checkpoint_timeout": "30min",
		}})
		if err != nil {
			return nil, err
		}
		l.pg, l.DSN = c, c.DSN()
	}
	if len(brokers) == 0 {
		// The broker listens through faultnet so that the broker-down
		// scenario can refuse connections on the same address.
		ln, err := faultnet.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			l.Close()
			return nil, fmt.Errorf("bench: kfake listener: %w", err)
		}
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(),
			kfake.ListenFn(func(network, addr string) (net.Listener, error) { return ln, nil }))
		if err != nil {
			_ = ln.Close()
			l.Close()
			return nil, fmt.Errorf("bench: kfake: %w", err)
		}
		l.kafka, l.ln, l.Brokers = c, ln, c.ListenAddrs()
	}
	return l, nil
}

// Kfake reports whether the broker is the in-process kfake cluster.
func (l *Local) Kfake() bool { return l.kafka != nil }

// SetBrokerUp makes the in-process broker reachable (true) or closes and
// refuses every connection to it (false). A no-op without one.
func (l *Local) SetBrokerUp(up bool) {
	if l.ln == nil {
		return
	}
	if up {
		l.ln.SetMode(faultnet.Up)
	} else {
		l.ln.SetMode(faultnet.Refuse)
	}
}

// Pgtemp reports whether Postgres is a throwaway pgtemp cluster.
func (l *Local) Pgtemp() bool { return l.pg != nil }

// Close stops the broker and the cluster that StartLocal started.
func (l *Local) Close() error {
	if l.kafka != nil {
		l.kafka.Close()
		l.kafka = nil
	}
	if l.pg != nil {
		err := l.pg.Stop()
		l.pg = nil
		return err
	}
	return nil
}

// runDB is one run's schema.
type runDB struct {
	Schema string
	// Config is a pool config whose connections use only Schema, named
	// writersApp.
	Config *pgxpool.Config
	// Pool is for the writers (MaxConns as asked).
	Pool *pgxpool.Pool
	// writersApp and relayApp are the application_name of the writers'
	// connections and of the relays' (in-process pools and relay
	// processes), so that the cost probe can find their server processes.
	writersApp, relayApp string
	env                  *Env
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// freshDB creates a schema with the outbox table and returns a pool on it
// with maxConns connections at most.
func (e *Env) freshDB(ctx context.Context, maxConns int32) (*runDB, error) {
	schema := "outbox_bench_" + randHex(4)
	conn, err := pgx.Connect(ctx, e.DSN)
	if err != nil {
		return nil, fmt.Errorf("bench: connect: %w", err)
	}
	_, err = conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	conn.Close(context.Background())
	if err != nil {
		return nil, fmt.Errorf("bench: create schema: %w", err)
	}
	db := &runDB{Schema: schema, env: e, writersApp: "outbox-bench-writers-" + schema, relayApp: "outbox-bench-relay-" + schema}
	cfg, err := pgxpool.ParseConfig(e.DSN)
	if err != nil {
		db.drop()
		return nil, fmt.Errorf("bench: parse database URL: %w", err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.ConnConfig.RuntimeParams["application_name"] = db.writersApp
	delete(cfg.ConnConfig.RuntimeParams, "options")
	db.Config = cfg
	if db.Pool, err = db.NewPool(ctx, maxConns); err != nil {
		db.drop()
		return nil, err
	}
	if _, err := outboxsql.Migrate(ctx, db.Pool); err != nil {
		db.Close()
		return nil, fmt.Errorf("bench: %w", err)
	}
	return db, nil
}

// NewPool opens another pool on the run's schema (connections named
// writersApp).
func (db *runDB) NewPool(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	return db.newPoolApp(ctx, maxConns, db.writersApp)
}

// newPoolApp opens a pool on the run's schema whose connections are named
// app.
func (db *runDB) newPoolApp(ctx context.Context, maxConns int32, app string) (*pgxpool.Pool, error) {
	cfg := db.Config.Copy()
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	cfg.MaxConns = maxConns
	cfg.MinConns = 0
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("bench: connect: %w", err)
	}
	return p, nil
}

// ConnectFunc opens a dedicated connection on the run's schema (for the
// notify listener).
func (db *runDB) ConnectFunc() func(ctx context.Context) (*pgx.Conn, error) {
	cc := db.Config.ConnConfig
	return func(ctx context.Context) (*pgx.Conn, error) { return pgx.ConnectConfig(ctx, cc.Copy()) }
}

// Close closes the pool and drops the schema.
func (db *runDB) Close() {
	if db.Pool != nil {
		db.Pool.Close()
	}
	db.drop()
}

func (db *runDB) drop() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, db.env.DSN)
	if err != nil {
		db.env.Log.Warn("drop schema: connect", zap.Error(err))
		return
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{db.Schema}.Sanitize()+" CASCADE"); err != nil {
		db.env.Log.Warn("drop schema", zap.String("schema", db.Schema), zap.Error(err))
	}
}

// dropTopic deletes topic (best effort), so that an in-process broker
// does not keep every earlier run's records in this process's memory.
func (e *Env) dropTopic(topic string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.Brokers...))
	if err != nil {
		return
	}
	defer cl.Close()
	req := kmsg.NewPtrDeleteTopicsRequest()
	req.TimeoutMillis = 10000
	req.TopicNames = []string{topic}
	rt := kmsg.NewDeleteTopicsRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	if _, err := req.RequestWith(ctx, cl); err != nil {
		e.Log.Warn("delete topic", zap.String("topic", topic), zap.Error(err))
	}
}

// freshTopic creates a new topic and waits until each partition has a
// leader.
func (e *Env) freshTopic(ctx context.Context, prefix string) (string, error) {
	name := "outbox-bench-" + strings.ReplaceAll(prefix, "_", "-") + "-" + randHex(4)
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.Brokers...))
	if err != nil {
		return "", fmt.Errorf("bench: kafka client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic = name
	rt.NumPartitions = e.Partitions
	rt.ReplicationFactor = -1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return "", fmt.Errorf("bench: create topic %s: %w", name, err)
	}
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return "", fmt.Errorf("bench: create topic %s: %w", name, err)
		}
	}
	for {
		mreq := kmsg.NewPtrMetadataRequest()
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(name)
		mreq.Topics = append(mreq.Topics, mt)
		mresp, err := mreq.RequestWith(ctx, cl)
		if err == nil && len(mresp.Topics) == 1 && mresp.Topics[0].ErrorCode == 0 && len(mresp.Topics[0].Partitions) == int(e.Partitions) {
			ok := true
			for _, p := range mresp.Topics[0].Partitions {
				if p.Leader < 0 || p.ErrorCode != 0 {
					ok = false
				}
			}
			if ok {
				return name, nil
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("bench: topic %s not ready: %w", name, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
