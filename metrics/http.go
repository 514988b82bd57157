package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox/notify"
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
	// Failed names the checks that failed ("database", "listener",
	// "broker", "relay", "stopping"), in that order; empty when Ready.
	Failed []string `json:"failed"`
	// Checks maps each check's name to its outcome.
	Checks map[string]Check `json:"checks"`
	// CheckedAt is when the checks ran (the result may be cached for
	// Config.ReadyCacheTTL).
	CheckedAt time.Time `json:"checked_at"`
}

// Ready runs the readiness checks, or returns the cached result if it is
// younger than Config.ReadyCacheTTL. The database ping and the broker ping
// run concurrently, each bounded by Config.CheckTimeout. Checks:
// "relay" (Attach was called), "database" (DB.Ping), "listener" (listening,
// or poll-only when Components.Listener is nil), "broker"
// (Components.Broker.Ping), and "stopping" (fails after SetStopping).
// Concurrent callers share one run of the checks.
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
		set("database", ping(m.db.Ping), "ok")
	}()
	if comps == nil || comps.Relay == nil {
		set("relay", errors.New("starting: waiting for the database and the broker"), "")
	} else {
		set("relay", nil, "running")
	}
	if comps != nil {
		if comps.Broker != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				set("broker", ping(comps.Broker.Ping), "ok")
			}()
		} else {
			set("broker", errors.New("no broker attached"), "")
		}
		if comps.Listener == nil {
			set("listener", nil, "poll-only (--no-notify)")
		} else if st := comps.Listener.State(); st != notify.StateListening {
			set("listener", errors.New("listener is "+st.String()), "")
		} else {
			set("listener", nil, st.String())
		}
	}
	if m.stopping.Load() {
		set("stopping", errors.New("shutting down"), "")
	}
	wg.Wait()
	r := Readiness{Ready: true, Checks: checks, CheckedAt: time.Now().UTC(), Failed: []string{}}
	for _, name := range []string{"database", "listener", "broker", "relay", "stopping"} {
		if c, ok := checks[name]; ok && !c.OK {
			r.Ready = false
			r.Failed = append(r.Failed, name)
		}
	}
	return r
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
