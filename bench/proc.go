package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// RelayPackage is the import path of the relay command that
// BuildRelay builds.
const RelayPackage = "github.com/pgoutbox/outbox/cmd/outbox-relay"

// BuildRelay builds cmd/outbox-relay into dir with `go build` (run from
// the current directory, which must be inside this module) and returns the
// binary's path. It is what the subprocess modes (drain notify-proc,
// broker-down) run unless Env.RelayBin names a binary already built.
func BuildRelay(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "outbox-relay")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, RelayPackage)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("bench: go build %s: %w: %s", RelayPackage, err, strings.TrimSpace(out.String()))
	}
	return bin, nil
}

// schemaURL returns dsn with search_path set to schema, so that a relay
// process finds the run's outbox table as "outbox", and application_name
// set to app (empty: left alone), so that the bench can find its server
// processes. dsn is a postgres:// URL or a keyword/value DSN.
func schemaURL(dsn, schema, app string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("bench: parse database URL: %w", err)
		}
		q := u.Query()
		q.Set("search_path", schema)
		q.Del("options") // as freshDB: the run's schema only
		if app != "" {
			q.Set("application_name", app)
		}
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	// keyword/value: a later keyword wins in pgx's parser.
	s := dsn + " search_path=" + schema
	if app != "" {
		s += " application_name=" + app
	}
	return s, nil
}

// relayArgs are the `outbox-relay run` flags equivalent to the in-process
// product relay of startRelay (relay.Config, lease.Config, notify channel;
// no retention cleaner), with the metrics server on metricsAddr (the bench
// reads the relay's counters there). With cfg.ProcDefaults only what
// connects it to the run is given (brokers, topic, channel, metrics
// address, logging, start-up wait; in ModeNotifyEveryTx also
// --claim-window, off): every other setting is the relay's default,
// retention included.
func relayArgs(brokers []string, topic, channel, metricsAddr string, cfg RelayConfig) []string {
	args := []string{"run",
		"--brokers", strings.Join(brokers, ","),
		"--topic", topic,
		"--channel", channel,
		"--log-level", "warn",
		"--log-format", "console",
		"--metrics-addr=" + metricsAddr,
		"--startup-wait", "30s",
	}
	if !cfg.ProcDefaults {
		args = append(args,
			"--poll-interval", cfg.PollInterval.String(),
			"--lease", cfg.Lease.String(),
			"--batch-size", strconv.Itoa(cfg.BatchSize),
			"--retention=-1s",
		)
		if cfg.ClaimWindowPoll != 0 {
			args = append(args, "--claim-window-poll="+cfg.ClaimWindowPoll.String())
		}
	}
	if cfg.ClaimWindow != 0 && (!cfg.ProcDefaults || cfg.Mode == ModeNotifyEveryTx) {
		args = append(args, "--claim-window="+cfg.ClaimWindow.String())
	}
	if cfg.BusyClaimInterval != 0 {
		args = append(args, "--busy-claim-interval="+cfg.BusyClaimInterval.String())
	}
	if cfg.Mode == ModePoll {
		args = append(args, "--no-notify")
	}
	if cfg.RelayID != "" {
		args = append(args, "--relay-id", cfg.RelayID)
	}
	return args
}

// relayProc is `outbox-relay run` running as a child process, so that its
// memory can be measured apart from the bench's consumer and broker.
type relayProc struct {
	cmd *exec.Cmd
	// metricsAddr is the relay's --metrics-addr (host:port).
	metricsAddr string
	// app is the application_name of its database connections.
	app    string
	notify bool
	last   relayStats // the last counters scraped
	lastMu sync.Mutex
	stderr *tailBuffer
	done   chan struct{}
	err    error // set before done is closed
	once   sync.Once
	log    *zap.Logger
}

// startRelayProc starts e.RelayBin (e.RelayBinB in ModeNotifyProcB) as a
// relay of cfg (notify, notify-proc, notify-proc-b or poll) on the run's schema, its database connections named
// db.relayApp. The database URL goes through the environment
// (OUTBOX_DATABASE_URL), not the command line, so that a password does not
// show in ps; other OUTBOX_* variables of the bench are not passed on. It
// returns once the process started; see waitReady.
func (e *Env) startRelayProc(db *runDB, topic, channel string, cfg RelayConfig, log *zap.Logger) (*relayProc, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	bin := e.RelayBin
	if cfg.Mode == ModeNotifyProcB {
		if bin = e.RelayBinB; bin == "" {
			return nil, errors.New("bench: Env.RelayBinB: required for mode notify-proc-b")
		}
	} else if bin == "" {
		return nil, errors.New("bench: Env.RelayBin: required for a relay subprocess (see BuildRelay)")
	}
	if cfg.Mode == ModeNaive {
		return nil, errors.New("bench: the naive relay cannot run as a subprocess")
	}
	dsn, err := schemaURL(e.DSN, db.Schema, db.relayApp)
	if err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args := relayArgs(e.Brokers, topic, channel, addr, cfg)
	if cfg.Mode == ModeNotifyProcB {
		args = append(args, e.RelayArgsB...)
	}
	cmd := exec.Command(bin, args...)
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "OUTBOX_") || strings.HasPrefix(kv, "DATABASE_URL=") {
			continue
		}
		env = append(env, kv)
	}
	cmd.Env = append(env, "OUTBOX_DATABASE_URL="+dsn)
	p := &relayProc{cmd: cmd, metricsAddr: addr, app: db.relayApp, notify: cfg.Mode != ModePoll,
		stderr: &tailBuffer{max: 16 << 10}, done: make(chan struct{}), log: log}
	cmd.Stdout, cmd.Stderr = p.stderr, p.stderr
	setChildAttrs(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start %s: %w", bin, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pid returns the process ID.
func (p *relayProc) Pid() int { return p.cmd.Process.Pid }

// waitReady waits up to timeout until the relay's metrics server answers
// and says the relay runs (outbox_relay_up 1) and, in notify mode, listens
// (outbox_listener_connected 1), as a production relay does long before
// the first event.
func (p *relayProc) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if err := p.Exited(); err != nil {
			return err
		}
		s, err := scrape(ctx, p.metricsAddr)
		if err == nil {
			up, okUp := promSum(s, "outbox_relay_up", "")
			conn, okConn := promSum(s, "outbox_listener_connected", "")
			if (!okUp || up == 1) && (!p.notify || !okConn || conn == 1) {
				return nil
			}
			last = fmt.Errorf("outbox_relay_up %v, outbox_listener_connected %v", up, conn)
		} else {
			last = err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: relay process not ready within %s: %w", timeout, last)
		}
		if err := waitCtx(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
}

// Stats returns the relay's counters from its /metrics; after a failed
// scrape (or once it stopped) the last ones read.
func (p *relayProc) Stats() relayStats {
	p.lastMu.Lock()
	defer p.lastMu.Unlock()
	select {
	case <-p.done:
		return p.last
	default:
	}
	s, err := scrape(context.Background(), p.metricsAddr)
	if err != nil {
		p.log.Warn("relay process: scrape failed", zap.Error(err))
		return p.last
	}
	p.last = relayStatsFromProm(s)
	return p.last
}

// Timings scrapes the relay's claim, mark and produce histograms from
// its /metrics (the zero value, which RelayTimings treats as missing,
// when the scrape fails).
func (p *relayProc) Timings() relayTimings {
	s, err := scrape(context.Background(), p.metricsAddr)
	if err != nil {
		p.log.Warn("relay process: scrape failed", zap.Error(err))
		return relayTimings{}
	}
	return relayTimingsFromProm(s)
}

// CPUSeconds returns the relay process's CPU time so far (user + system),
// in seconds.
func (p *relayProc) CPUSeconds() (float64, error) { return processCPUSeconds(p.Pid()) }

// Exited reports an error if the process has already exited.
func (p *relayProc) Exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("bench: relay process exited: %v: %s", p.err, p.stderr.Tail())
	default:
		return nil
	}
}

// Stop sends SIGTERM, waits up to 20s for a graceful exit, then kills.
func (p *relayProc) Stop() {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			p.log.Warn("relay process did not stop within 20s; killing it")
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t := p.stderr.Tail(); t != "" {
			p.log.Debug("relay process output", zap.String("tail", t))
		}
	})
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

// Tail returns the last bytes written, trimmed.
func (t *tailBuffer) Tail() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}

// procMemMiB returns VmRSS and VmHWM of process pid in MiB, from
// /proc/<pid>/status; zeros where unavailable.
func procMemMiB(pid int) (rss, hwm float64) {
	file := "/proc/" + strconv.Itoa(pid) + "/status"
	kb := func(key string) float64 {
		if f := strings.Fields(procField(file, key)); len(f) > 0 {
			n, _ := strconv.ParseFloat(f[0], 64)
			return n / 1024
		}
		return 0
	}
	return kb("VmRSS"), kb("VmHWM")
}

// rssSampler samples a process's VmRSS every interval and keeps the
// maximum per phase (phases are numbered from 0 by the caller).
type rssSampler struct {
	pid    int
	phase  atomic.Int32
	max    []atomic.Uint64 // KiB
	last   atomic.Uint64   // KiB
	stop   chan struct{}
	done   chan struct{}
	closed sync.Once
}

func startRSSSampler(pid, phases int, interval time.Duration) *rssSampler {
	s := &rssSampler{pid: pid, max: make([]atomic.Uint64, phases), stop: make(chan struct{}), done: make(chan struct{})}
	s.sample()
	go func() {
		defer close(s.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.sample()
			}
		}
	}()
	return s
}

func (s *rssSampler) sample() {
	rss, _ := procMemMiB(s.pid)
	v := uint64(rss * 1024)
	if v == 0 {
		return // exited or not readable
	}
	s.last.Store(v)
	m := &s.max[s.phase.Load()]
	if v > m.Load() {
		m.Store(v)
	}
}

// SetPhase takes one sample for the current phase and switches to p.
func (s *rssSampler) SetPhase(p int) {
	s.sample()
	s.phase.Store(int32(p))
	s.sample()
}

// Stop takes a last sample and stops sampling.
func (s *rssSampler) Stop() {
	s.closed.Do(func() {
		close(s.stop)
		<-s.done
		s.sample()
	})
}

// Max returns phase p's highest sample in MiB.
func (s *rssSampler) Max(p int) float64 { return float64(s.max[p].Load()) / 1024 }

// waitCtx sleeps d or until ctx is done.
func waitCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
