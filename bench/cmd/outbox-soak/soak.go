package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/checker"
	"github.com/pgoutbox/outbox/internal/faultnet"
	"github.com/pgoutbox/outbox/internal/pgtemp"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

type config struct {
	duration     time.Duration
	rate         int
	faultEvery   time.Duration
	outage       time.Duration
	faults       string
	relays       int
	lease        time.Duration
	partitions   int
	aggregates   int
	writers      int
	drainTimeout time.Duration
	databaseURL  string
	brokers      string
	relayBin     string
	keepLogs     bool
	holdSnapshot time.Duration
}

const allFaults = "kill-relay,broker-refuse,broker-blackhole,pg-restart,listener-terminate,db-read-only,leader-move"

// soakBrokers is the number of in-process kfake brokers: more than one, so
// that partition leaders can move (the leader-move fault).
const soakBrokers = 3

// resumeWithin is how soon after a fault ends publishing must go on: the
// soak fails otherwise, whatever the backlog the fault left.
const resumeWithin = 10 * time.Second

func (c *config) register(fs *flag.FlagSet) {
	fs.DurationVar(&c.duration, "duration", 10*time.Minute, "how long to write events and inject faults")
	fs.IntVar(&c.rate, "rate", 2000, "events per second written")
	fs.DurationVar(&c.faultEvery, "fault-every", 30*time.Second, "interval between faults")
	fs.DurationVar(&c.outage, "outage", 10*time.Second, "how long a broker refuses or blackholes connections")
	fs.StringVar(&c.faults, "faults", allFaults, "faults to cycle through, comma-separated")
	fs.IntVar(&c.relays, "relays", 2, "relay subprocesses")
	fs.DurationVar(&c.lease, "lease", 5*time.Second, "the relays' --lease")
	fs.IntVar(&c.partitions, "partitions", 8, "partitions of the soak topic")
	fs.IntVar(&c.aggregates, "aggregates", 10000, "distinct aggregates")
	fs.IntVar(&c.writers, "writers", 8, "writer goroutines (each owns a share of the aggregates)")
	fs.DurationVar(&c.drainTimeout, "drain-timeout", 3*time.Minute, "how long to wait, after writing stopped, for every event to arrive")
	fs.StringVar(&c.databaseURL, "database-url", "", "use this PostgreSQL (a fresh schema in it) instead of a throwaway cluster; Postgres restarts are skipped")
	fs.StringVar(&c.brokers, "brokers", "", "use these Kafka brokers instead of an in-process kfake; broker faults are skipped")
	fs.StringVar(&c.relayBin, "relay-bin", "", "outbox-relay binary (default: go build ./cmd/outbox-relay)")
	fs.BoolVar(&c.keepLogs, "keep-logs", false, "keep the relays' log directory even when the run passed")
	fs.DurationVar(&c.holdSnapshot, "hold-snapshot", 10*time.Minute, "keep a REPEATABLE READ transaction open this long from the start (VACUUM cannot clean the outbox table meanwhile; claim p99 is reported per minute); 0: none")
}

func (c *config) validate() error {
	switch {
	case c.duration <= 0:
		return errors.New("--duration must be positive")
	case c.rate <= 0:
		return errors.New("--rate must be positive")
	case c.faultEvery <= 0:
		return errors.New("--fault-every must be positive")
	case c.relays < 1:
		return errors.New("--relays must be at least 1")
	case c.writers < 1 || c.aggregates < c.writers:
		return errors.New("--writers must be at least 1 and at most --aggregates")
	case c.partitions < 1:
		return errors.New("--partitions must be at least 1")
	}
	for _, f := range strings.Split(c.faults, ",") {
		if f != "" && !strings.Contains(allFaults, f) {
			return fmt.Errorf("--faults: unknown fault %q (known: %s)", f, allFaults)
		}
	}
	return nil
}

// soak is one run's environment.
type soak struct {
	cfg     config
	logDir  string
	bin     string
	cluster *pgtemp.Cluster      // nil with --database-url
	lns     []*faultnet.Listener // one per kfake broker; nil with --brokers
	kfake   *kfake.Cluster
	dsn     string // with search_path set to schema
	schema  string
	pool    *pgxpool.Pool
	brokers []string
	topic   string

	mu     sync.Mutex
	relays []*relayProc
	gen    int

	writeErrs atomic.Int64
	commits   []map[uuid.UUID]time.Time // per writer: commit time of each event known committed
	// stuck lists the faults after which publishing did not resume within
	// resumeWithin.
	stuck []string
	// snapshotSince is when the held snapshot was opened (unix nanos), 0
	// while none is held.
	snapshotSince atomic.Int64
}

func logf(format string, args ...any) {
	fmt.Printf("%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

func run(ctx context.Context, cfg config) (bool, error) {
	s := &soak{cfg: cfg}
	var err error
	if s.logDir, err = os.MkdirTemp("", "outbox-soak-"); err != nil {
		return false, err
	}
	passed := false
	defer func() {
		if passed && !cfg.keepLogs {
			_ = os.RemoveAll(s.logDir)
		} else {
			fmt.Printf("relay logs: %s\n", s.logDir)
		}
	}()
	// Deferred calls run last-in first-out: relays stop before the
	// database and the broker go away.
	defer s.tearDown()
	defer s.stopRelays()
	if err := s.setUp(ctx); err != nil {
		return false, err
	}

	obs, err := checker.NewObserver(context.Background(), s.brokers, s.topic)
	if err != nil {
		return false, err
	}
	defer obs.Stop()

	for i := 0; i < cfg.relays; i++ {
		if err := s.startRelay(i); err != nil {
			return false, err
		}
	}

	logf("soak: %s at %d events/s, a fault every %s (%s), %d relays, lease %s, topic %s (%d partitions)",
		cfg.duration, cfg.rate, cfg.faultEvery, cfg.faults, cfg.relays, cfg.lease, s.topic, cfg.partitions)

	runCtx, stopRun := context.WithTimeout(ctx, cfg.duration)
	defer stopRun()
	var wg sync.WaitGroup
	var attempted atomic.Int64
	s.commits = make([]map[uuid.UUID]time.Time, cfg.writers)
	for w := 0; w < cfg.writers; w++ {
		s.commits[w] = map[uuid.UUID]time.Time{}
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			s.writer(runCtx, w, &attempted)
		}(w)
	}
	faultsDone := make(chan []string)
	go func() { faultsDone <- s.injectFaults(runCtx) }()
	claimsDone := make(chan []string)
	go func() { claimsDone <- s.watchClaims(runCtx) }()
	if cfg.holdSnapshot > 0 {
		go s.holdSnapshot(runCtx, cfg.holdSnapshot)
	}
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-t.C:
				logf("progress: %d events written, %d distinct delivered, %d records read, %d write errors",
					attempted.Load(), obs.Distinct(), obs.Records(), s.writeErrs.Load())
			}
		}
	}()
	<-runCtx.Done()
	wg.Wait()
	injected := <-faultsDone
	claimLines := <-claimsDone
	<-progressDone
	writeStopped := time.Now()

	// Every fault is over; make sure all relays run, then drain.
	s.restoreAll()
	s.ensureRelays()
	ectx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	exp, err := s.expected(ectx)
	cancel()
	if err != nil {
		return false, err
	}
	logf("writing stopped: %d events committed; draining (up to %s)", len(exp), cfg.drainTimeout)
	// Ctrl-C during the run ends the writing early; the drain and the check
	// still run (a second Ctrl-C kills the soak: main restored the default
	// signal handling once ctx ended).
	dctx, cancel := context.WithTimeout(context.Background(), cfg.drainTimeout)
	drained := obs.WaitDistinct(dctx, len(exp))
	if drained {
		_ = obs.WaitCaughtUp(dctx)
	}
	cancel()
	drainTime := time.Since(writeStopped)
	observed := obs.Stop()
	rep := checker.Check(exp, observed)

	lat := s.latencies(observed)
	fmt.Println()
	fmt.Println("=== outbox soak ===")
	fmt.Printf("duration           %s at %d events/s target (%.0f/s committed), %d relays, lease %s\n",
		cfg.duration, cfg.rate, float64(len(exp))/cfg.duration.Seconds(), cfg.relays, cfg.lease)
	fmt.Printf("faults injected    %d: %s\n", len(injected), strings.Join(injected, ", "))
	fmt.Printf("write errors       %d (transactions that failed during faults; their events are not counted unless the table has them)\n", s.writeErrs.Load())
	fmt.Printf("committed          %d\n", rep.Committed)
	fmt.Printf("delivered          %d\n", rep.Delivered)
	fmt.Printf("lost               %d\n", rep.Lost)
	fmt.Printf("duplicates         %d\n", rep.Duplicates)
	fmt.Printf("re-reads           %d (records read again at an offset already read: the consumer's position reset when a partition moved; not counted above)\n", obs.Rereads())
	fmt.Printf("phantoms           %d\n", rep.Phantoms)
	fmt.Printf("payload mismatches %d\n", rep.PayloadMismatches)
	fmt.Printf("order violations   %d\n", rep.OrderViolations)
	fmt.Printf("latency            max %s, p99 %s, p50 %s (commit to first delivery, %d events with a known commit time)\n",
		lat.max.Round(time.Millisecond), lat.p99.Round(time.Millisecond), lat.p50.Round(time.Millisecond), lat.n)
	fmt.Printf("drain              %s after writing stopped\n", drainTime.Round(time.Millisecond))
	fmt.Println("claim time         per minute, the relays' claims that found rows (bucket upper bounds):")
	for _, l := range claimLines {
		fmt.Println("  " + l)
	}
	fmt.Printf("not resumed        %d fault(s) after which publishing did not resume within %s: %s\n", len(s.stuck), resumeWithin, strings.Join(s.stuck, ", "))
	for _, e := range rep.Examples {
		fmt.Println("  " + e)
	}
	if rep.OK() && len(s.stuck) == 0 {
		fmt.Println("RESULT             PASS")
		passed = true
		return true, nil
	}
	fmt.Println("RESULT             FAIL")
	return false, nil
}

// setUp provides PostgreSQL, the schema, the broker, the topic and the
// relay binary.
func (s *soak) setUp(ctx context.Context) error {
	base := s.cfg.databaseURL
	if base == "" {
		c, err := pgtemp.Start(ctx, pgtemp.Options{Fsync: true})
		if err != nil {
			return err
		}
		s.cluster = c
		base = c.DSN()
		logf("postgres: throwaway cluster (fsync on) at %s", base)
	}
	s.schema = "soak_" + randHex(6)
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	_, err = conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{s.schema}.Sanitize())
	conn.Close(context.Background())
	if err != nil {
		return fmt.Errorf("create schema: %w", err)
	}
	if s.dsn, err = withSearchPath(base, s.schema); err != nil {
		return err
	}
	pcfg, err := pgxpool.ParseConfig(s.dsn)
	if err != nil {
		return err
	}
	pcfg.MaxConns = int32(s.cfg.writers + 4)
	if s.pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return err
	}
	if _, err := outboxsql.Migrate(ctx, s.pool); err != nil {
		return err
	}

	if s.cfg.brokers != "" {
		s.brokers = strings.Split(s.cfg.brokers, ",")
	} else {
		// Every broker listens through its own faultnet listener, so the
		// broker faults take the whole cluster down.
		s.kfake, err = kfake.NewCluster(kfake.NumBrokers(soakBrokers), kfake.AllowAutoTopicCreation(),
			kfake.ListenFn(func(network, _ string) (net.Listener, error) {
				ln, err := faultnet.Listen(network, "127.0.0.1:0")
				if err == nil {
					s.lns = append(s.lns, ln)
				}
				return ln, err
			}))
		if err != nil {
			return fmt.Errorf("kfake: %w", err)
		}
		s.brokers = s.kfake.ListenAddrs()
		logf("kafka: in-process kfake at %s (through faultnet)", strings.Join(s.brokers, ","))
	}
	s.topic = "outbox-soak-" + randHex(4)
	if err := createTopic(ctx, s.brokers, s.topic, int32(s.cfg.partitions)); err != nil {
		return err
	}

	s.bin = s.cfg.relayBin
	if s.bin == "" {
		s.bin = filepath.Join(s.logDir, "outbox-relay")
		cmd := exec.CommandContext(ctx, "go", "build", "-o", s.bin, "github.com/pgoutbox/outbox/cmd/outbox-relay")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build outbox-relay (run from the module directory or pass --relay-bin): %v\n%s", err, out)
		}
	}
	return nil
}

func (s *soak) tearDown() {
	if s.pool != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if s.cluster == nil {
			_, _ = s.pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{s.schema}.Sanitize()+" CASCADE")
		}
		cancel()
		s.pool.Close()
	}
	if s.kfake != nil {
		s.kfake.Close()
	}
	if s.cluster != nil {
		_ = s.cluster.Stop()
	}
}

func withSearchPath(dsn, schema string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("--database-url: %w", err)
		}
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	return strings.TrimSpace(dsn) + " search_path=" + schema, nil
}

func createTopic(ctx context.Context, brokers []string, topic string, partitions int32) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, -1
	req.Topics = append(req.Topics, rt)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := req.RequestWith(cctx, cl)
	if err != nil {
		return fmt.Errorf("create topic: %w", err)
	}
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", topic, err)
		}
	}
	return nil
}

// writer commits transactions of 10 events at its share of --rate, on the
// aggregates a with a % writers == w, so that one goroutine orders each
// aggregate's events. Failed transactions (during faults) are counted and
// skipped; the table decides what was committed.
func (s *soak) writer(ctx context.Context, w int, attempted *atomic.Int64) {
	const perTx = 10
	w8r, _ := outbox.NewWriter(outbox.WriterConfig{Channel: s.schema})
	interval := time.Duration(float64(time.Second) * perTx * float64(s.cfg.writers) / float64(s.cfg.rate))
	tick := time.NewTicker(interval)
	defer tick.Stop()
	share := s.cfg.aggregates / s.cfg.writers
	n := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		evs := make([]outbox.Event, perTx)
		for i := range evs {
			agg := fmt.Sprintf("agg-%d", w+s.cfg.writers*((n*7919)%share))
			n++
			evs[i] = outbox.Event{ID: outbox.NewID(), AggregateID: agg, Type: "soak",
				Payload: []byte(fmt.Sprintf(`{"writer":%d,"n":%d,"aggregate":%q}`, w, n, agg))}
		}
		tctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := s.commitTx(tctx, w8r, evs)
		cancel()
		attempted.Add(perTx)
		if err != nil {
			s.writeErrs.Add(1)
			continue
		}
		now := time.Now()
		for _, e := range evs {
			s.commits[w][e.ID] = now
		}
	}
}

func (s *soak) commitTx(ctx context.Context, w *outbox.Writer, evs []outbox.Event) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	if err := w.Add(ctx, tx, evs...); err != nil {
		_ = tx.Rollback(context.Background())
		return err
	}
	return tx.Commit(ctx)
}

func (s *soak) expected(ctx context.Context) ([]checker.Expected, error) {
	for {
		exp, err := checker.ExpectedFromTable(ctx, s.pool, "outbox")
		if err == nil || ctx.Err() != nil {
			return exp, err
		}
		time.Sleep(500 * time.Millisecond) // the database may still be restarting
	}
}

type latencyStats struct {
	n             int
	max, p50, p99 time.Duration
}

func (s *soak) latencies(observed []checker.Observed) latencyStats {
	first := map[string]time.Time{}
	for _, o := range observed {
		if t, ok := first[o.EventID]; !ok || o.ReceivedAt.Before(t) {
			first[o.EventID] = o.ReceivedAt
		}
	}
	var ds []time.Duration
	for _, m := range s.commits {
		for id, c := range m {
			if r, ok := first[id.String()]; ok {
				ds = append(ds, r.Sub(c))
			}
		}
	}
	if len(ds) == 0 {
		return latencyStats{}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return latencyStats{n: len(ds), max: ds[len(ds)-1], p50: ds[len(ds)/2], p99: ds[len(ds)*99/100]}
}

// relayProc is one relay subprocess.
type relayProc struct {
	name        string
	metricsAddr string // its /metrics, for the claim percentiles
	cmd         *exec.Cmd
	log         *os.File
	done        chan struct{}
}

func (s *soak) startRelay(slot int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	name := fmt.Sprintf("relay%d-%d", slot, s.gen)
	f, err := os.Create(filepath.Join(s.logDir, name+".log"))
	if err != nil {
		return err
	}
	maddr, err := freeAddr()
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, "run",
		"--database-url", s.dsn, "--brokers", strings.Join(s.brokers, ","), "--topic", s.topic,
		"--channel", s.schema, "--relay-id", name, "--lease", s.cfg.lease.String(),
		"--shutdown-timeout", "5s", "--metrics-addr", maddr)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OUTBOX_") && !strings.HasPrefix(kv, "DATABASE_URL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start relay: %w", err)
	}
	p := &relayProc{name: name, metricsAddr: maddr, cmd: cmd, log: f, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	for len(s.relays) <= slot {
		s.relays = append(s.relays, nil)
	}
	s.relays[slot] = p
	return nil
}

func (p *relayProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *relayProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// ensureRelays restarts any relay that is not running (a relay exiting by
// itself is reported).
func (s *soak) ensureRelays() {
	s.mu.Lock()
	var dead []int
	for i, p := range s.relays {
		if p.exited() {
			logf("relay %s had exited (%v); see %s", p.name, p.cmd.ProcessState, p.log.Name())
			dead = append(dead, i)
		}
	}
	s.mu.Unlock()
	for _, i := range dead {
		if err := s.startRelay(i); err != nil {
			logf("restart relay: %v", err)
		}
	}
}

func (s *soak) stopRelays() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.relays {
		if p != nil {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, p := range s.relays {
		if p == nil {
			continue
		}
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			p.kill()
		}
	}
}

// setBrokers sets every kfake broker's listener to mode.
func (s *soak) setBrokers(mode faultnet.Mode) {
	for _, ln := range s.lns {
		ln.SetMode(mode)
	}
}

func (s *soak) restoreAll() {
	s.setBrokers(faultnet.Up)
	if s.cluster != nil {
		if err := s.setReadOnly(false); err != nil {
			logf("restore: database writable: %v", err)
		}
	}
}

// injectFaults injects one fault every --fault-every until ctx ends, and
// returns what it injected.
func (s *soak) injectFaults(ctx context.Context) []string {
	var names []string
	for _, f := range strings.Split(s.cfg.faults, ",") {
		if f != "" {
			names = append(names, f)
		}
	}
	var injected []string
	t := time.NewTicker(s.cfg.faultEvery)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return injected
		case <-t.C:
		}
		name := names[i%len(names)]
		logf("fault %s: injecting", name)
		did, err := s.inject(ctx, name, i)
		switch {
		case err != nil:
			logf("fault %s: %v", name, err)
			injected = append(injected, name+"(error)")
		case did == "":
			logf("fault %s: skipped (not controllable here)", name)
		default:
			logf("fault %s: %s", name, did)
			injected = append(injected, name)
		}
		s.ensureRelays()
		if did != "" && err == nil {
			s.checkResumed(ctx, name)
		}
	}
}

func (s *soak) inject(ctx context.Context, name string, i int) (string, error) {
	switch name {
	case "kill-relay":
		s.mu.Lock()
		slot := i % len(s.relays)
		p := s.relays[slot]
		s.mu.Unlock()
		p.kill()
		sleepCtx(ctx, time.Second)
		if err := s.startRelay(slot); err != nil {
			return "", err
		}
		return fmt.Sprintf("SIGKILLed %s, restarted after 1s", p.name), nil
	case "broker-refuse", "broker-blackhole":
		if s.lns == nil {
			return "", nil
		}
		mode, what := faultnet.Refuse, "refusing connections"
		if name == "broker-blackhole" {
			mode, what = faultnet.Blackhole, "blackholed"
		}
		s.setBrokers(mode)
		sleepCtx(ctx, s.cfg.outage)
		s.setBrokers(faultnet.Up)
		return fmt.Sprintf("brokers %s for %s", what, s.cfg.outage), nil
	case "leader-move":
		if s.kfake == nil {
			return "", nil
		}
		// Every partition's leader moves to the next broker at once, as
		// after a broker restart: produce requests to the old leaders get
		// NOT_LEADER_OR_FOLLOWER until the relays' producers refresh
		// their metadata.
		for p := int32(0); p < int32(s.cfg.partitions); p++ {
			to := (s.kfake.LeaderFor(s.topic, p) + 1) % soakBrokers
			if err := s.kfake.MoveTopicPartition(s.topic, p, to); err != nil {
				return "", fmt.Errorf("move %s/%d to broker %d: %w", s.topic, p, to, err)
			}
		}
		return fmt.Sprintf("moved the leaders of all %d partitions to the next broker", s.cfg.partitions), nil
	case "pg-restart":
		if s.cluster == nil {
			return "", nil
		}
		start := time.Now()
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := s.cluster.Restart(rctx); err != nil {
			return "", err
		}
		return fmt.Sprintf("postgres restarted in %s", time.Since(start).Round(time.Millisecond)), nil
	case "db-read-only":
		if s.cluster == nil {
			return "", nil
		}
		if err := s.setReadOnly(true); err != nil {
			return "", err
		}
		sleepCtx(ctx, s.cfg.outage)
		if err := s.setReadOnly(false); err != nil {
			return "", err
		}
		return fmt.Sprintf("database read-only for %s", s.cfg.outage), nil
	case "listener-terminate":
		tctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var n int
		err := s.pool.QueryRow(tctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
			FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND query ILIKE 'listen %' AND query ILIKE '%' || $1 || '%'`, s.schema).Scan(&n)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("terminated %d LISTEN backend(s)", n), nil
	}
	return "", fmt.Errorf("unknown fault")
}

// checkResumed waits, right after fault name ended, until the relays have
// published a batch's worth of the backlog it left (500 events, or the
// whole backlog if smaller, but at least 100), and records the fault as stuck if that takes
// longer than resumeWithin.
func (s *soak) checkResumed(ctx context.Context, name string) {
	count := func(q string) (int64, error) {
		qctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var n int64
		err := s.pool.QueryRow(qctx, q).Scan(&n)
		return n, err
	}
	ended := time.Now()
	backlog, err1 := count("SELECT count(*) FROM outbox WHERE published_at IS NULL AND dead_lettered_at IS NULL")
	published, err2 := count("SELECT count(*) FROM outbox WHERE published_at IS NOT NULL")
	if err := errors.Join(err1, err2); err != nil {
		logf("fault %s: cannot read the backlog: %v", name, err)
		return
	}
	// A batch's worth of the backlog, and at least 100 events (0.05-0.1 s
	// of writes) even when the fault left none (a leader move): events
	// written after the fault must go out too.
	want := published + max(min(backlog, 500), 100)
	for {
		n, err := count("SELECT count(*) FROM outbox WHERE published_at IS NOT NULL")
		if err == nil && n >= want {
			logf("fault %s: publishing resumed %s after it ended (backlog %d events, %.0f batches of 500)",
				name, time.Since(ended).Round(10*time.Millisecond), backlog, float64(backlog)/500)
			return
		}
		if time.Since(ended) > resumeWithin || ctx.Err() != nil {
			if ctx.Err() == nil {
				logf("fault %s: publishing did NOT resume within %s (backlog %d events, %d published since)", name, resumeWithin, backlog, n-published)
				s.stuck = append(s.stuck, name)
			}
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// setReadOnly turns default_transaction_read_only on or off for the whole
// throwaway cluster (ALTER SYSTEM and a reload), as a failover to a replica
// does to the relays' sessions.
func (s *soak) setReadOnly(on bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.cluster.DSN())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	v := "off"
	if on {
		v = "on"
	}
	for _, q := range []string{"SET default_transaction_read_only = off", "ALTER SYSTEM SET default_transaction_read_only = " + v, "SELECT pg_reload_conf()"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
