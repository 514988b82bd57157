package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox/internal/listen"
)

// Check is the outcome of one readiness check.
type Check struct {
	// OK is true when the check passed.
	OK bool `json:"ok"`
	// Detail says what was seen: "ok", "poll-only (--no-notify)", a
	// listener state, or the error.
	Detail string `json:"detail"`
}

// Readiness is the result of the readiness checks, as /readyz returns it
// (JSON, status 200 when Ready, else 503).
type Readiness struct {
	// Ready is true when every check passed.
	Ready bool `json:"ready"`
	// Failed names the checks that failed ("database", "table",
	// "partitions", "listener", "broker", "relay", "backlog", "stopping"),
	// in that order; empty when
	// Ready.
	Failed []string `json:"failed"`
	// Checks maps each check's name to its outcome.
	Checks map[string]Check `json:"checks"`
	// CheckedAt is when the checks ran (the result may be cached for
	// Config.ReadyCacheTTL).
	CheckedAt time.Time `json:"checked_at"`
}

// Ready runs the readiness checks, or returns the cached result if it is
// younger than Config.ReadyCacheTTL. Readiness means "events are moving",
// not "connections are open". The database ping and the broker ping run
// concurrently, each bounded by Config.CheckTimeout. Checks:
//
//   - "relay": Attach was called and the relay's Health says it moves
//     events (no step stalled for longer than relay.Config.StallTimeout:
//     every claim failing, e.g. a read-only database; claimed events none
//     of which is published, e.g. a broker that accepts connections but
//     never answers; every mark failing); the detail names the step and
//     the last error;
//   - "database": one query (it pings) that fails on a hot standby
//     (pg_is_in_recovery(): "connected to a standby (in recovery) at
//     host:port"), where every claim would fail with SQLSTATE 25006 — the
//     relay pointed at a replica, or left on a demoted node after a
//     failover;
//   - "table": the last table check (CheckTable, every Config.Interval)
//     found nothing wrong: the outbox table and its seq sequence are
//     logged (an UNLOGGED table is emptied by a crash), and the sequence
//     hands out seqs above the table's; the detail names the fix;
//   - "partitions": on a time-partitioned table, the relay's last round
//     of creating its coming time partitions created each
//     (SetTimePartitions); the detail names the table, the partitions and
//     what to do (rows in the DEFAULT partition are a gauge and an alert,
//     not a readiness failure: they are still published);
//   - "listener": listening, or poll-only when Components.Listener is nil;
//     otherwise the state, and the reason when the listener gives one
//     (ListenerReasoner: a deaf listener behind a transaction pooler, a
//     listener on a standby);
//   - "broker": Components.Broker.Ping, and, when it implements
//     TopicChecker, that Config.Topics exist (a missing topic is named);
//   - "registry": with a Schema Registry format, Components.Registry.Ping
//     (unreachable, or the credentials refused);
//   - "backlog": with Config.ReadyMaxAge, the oldest claimable event is
//     not older than it; it fails too while the table stats, which read
//     that age, have failed since the start (the age is unknown);
//   - "stopping": fails after SetStopping.
//
// Concurrent callers share one run of the checks.
//
// Before Attach, the "relay" check fails with "starting", followed by
// what SetStarting last said.
func (m *Metrics) Ready(ctx context.Context) Readiness {
	m.readyMu.Lock()
	defer m.readyMu.Unlock()
	if m.cfg.ReadyCacheTTL > 0 && !m.readyAt.IsZero() && time.Since(m.readyAt) < m.cfg.ReadyCacheTTL && !m.stopping.Load() {
		return m.readyResult
	}
	r := m.check(ctx)
	m.readyAt, m.readyResult = time.Now(), r
	return r
}

func (m *Metrics) check(ctx context.Context) Readiness {
	comps := m.comps.Load()
	checks := map[string]Check{}
	var mu sync.Mutex
	set := func(name string, err error, okDetail string) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			checks[name] = Check{OK: false, Detail: err.Error()}
		} else {
			checks[name] = Check{OK: true, Detail: okDetail}
		}
	}
	ping := func(p func(context.Context) error) error {
		cctx, cancel := context.WithTimeout(ctx, m.cfg.CheckTimeout)
		defer cancel()
		return p(cctx)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		set("database", ping(m.checkDatabase), "ok")
	}()
	set("table", m.tableProblem(), "ok")
	set("partitions", m.partitionsProblem(), "ok")
	if comps == nil || comps.Relay == nil {
		detail := "starting: waiting for the database and the broker"
		if st := m.starting.Load(); st != nil {
			detail = "starting: " + *st
		}
		set("relay", errors.New(detail), "")
	} else if h := comps.Relay.Health(); !h.Moving {
		set("relay", fmt.Errorf("stalled since %s: %s: %s", h.Since.UTC().Format(time.RFC3339), h.Step, h.Reason), "")
	} else {
		set("relay", nil, "moving events")
	}
	if m.cfg.ReadyMaxAge > 0 {
		if o := m.oldest.Load(); o == nil && m.refreshFailing.Load() {
			// Never read: the age may be anything.
			set("backlog", errors.New("the age of the oldest claimable event is unknown: the table stats have failed since the start (the log line \"table stats failed\" says why)"), "")
		} else if o != nil {
			if age := o.age(o.claimable, time.Now()); age > m.cfg.ReadyMaxAge.Seconds() {
				set("backlog", fmt.Errorf("the oldest claimable event is %.0fs old, over %s (--ready-max-age)", age, m.cfg.ReadyMaxAge), "")
			} else {
				set("backlog", nil, fmt.Sprintf("oldest claimable event %.1fs old", age))
			}
		}
	}
	if comps != nil {
		if comps.Broker != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := ping(comps.Broker.Ping)
				if tc, ok := comps.Broker.(TopicChecker); ok && err == nil && len(m.cfg.Topics) > 0 {
					err = ping(func(ctx context.Context) error { return tc.CheckTopics(ctx, m.cfg.Topics...) })
				}
				set("broker", err, "ok")
			}()
		} else {
			set("broker", errors.New("no broker attached"), "")
		}
		if comps.Registry != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				set("registry", ping(comps.Registry.Ping), "ok")
			}()
		}
		if comps.Listener == nil {
			set("listener", nil, "poll-only (--no-notify)")
		} else if st := comps.Listener.State(); st != listen.StateListening {
			detail := "listener is " + st.String()
			if lr, ok := comps.Listener.(ListenerReasoner); ok && lr.Reason() != "" {
				detail += ": " + lr.Reason()
			}
			set("listener", errors.New(detail), "")
		} else {
			set("listener", nil, st.String())
		}
	}
	if m.stopping.Load() {
		set("stopping", errors.New("shutting down"), "")
	}
	wg.Wait()
	r := Readiness{Ready: true, Checks: checks, CheckedAt: time.Now().UTC(), Failed: []string{}}
	for _, name := range []string{"database", "table", "partitions", "listener", "broker", "registry", "relay", "backlog", "stopping"} {
		if c, ok := checks[name]; ok && !c.OK {
			r.Ready = false
			r.Failed = append(r.Failed, name)
		}
	}
	return r
}

// ListenerReasoner is implemented by a Components.Listener that can say why
// it does not listen (*listen.Listener: Reason, in its deaf and standby
// states); the "listener" readiness check adds the reason to its detail.
type ListenerReasoner interface {
	// Reason is "" when there is nothing to add to the state.
	Reason() string
}

// checkDatabase runs the "database" readiness check: the server answers and
// is not a standby.
func (m *Metrics) checkDatabase(ctx context.Context) error {
	r, err := queryOne[struct {
		InRecovery bool    `db:"in_recovery"`
		Host       *string `db:"host"`
		Port       *int32  `db:"port"`
	}](ctx, m.db, m.recovery.SQL)
	if err != nil {
		return err
	}
	if !r.InRecovery {
		return nil
	}
	addr := "a unix socket"
	if r.Host != nil && r.Port != nil {
		addr = net.JoinHostPort(*r.Host, strconv.Itoa(int(*r.Port)))
	}
	return fmt.Errorf("connected to a standby (in recovery) at %s: claims cannot write there until it is promoted; point --database-url at the primary", addr)
}

// Handler returns the HTTP handler: GET /metrics (Prometheus text or
// OpenMetrics format from the Metrics' own registry), /healthz (200 "ok"
// while the process runs), /readyz (see Ready; 200 or 503 with the
// Readiness as JSON).
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		Registry:          m.reg,
		EnableOpenMetrics: true,
		ErrorLog:          zap.NewStdLog(m.log),
	}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, req *http.Request) {
		r := m.Ready(req.Context())
		w.Header().Set("Content-Type", "application/json")
		if !r.Ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(r)
	})
	return mux
}

// Serve serves Handler on ln until ctx is done, then shuts the server down
// (in-flight requests get up to 5s) and returns nil; it returns the
// server's error if serving fails otherwise. It closes ln.
func (m *Metrics) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           m.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          zap.NewStdLog(m.log),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	m.log.Info("metrics server listening", zap.String("addr", ln.Addr().String()))
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// SetStarting records what the relay waits for before Attach (e.g.
// "waiting for the broker: dial tcp ...: connection refused"): the
// "relay" check of /readyz says it, so that the probe names the cause the
// log gives. Safe for concurrent use.
func (m *Metrics) SetStarting(what string) { m.starting.Store(&what) }
