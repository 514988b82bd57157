// Package notify wakes the relay when events are committed: it LISTENs on a
// Postgres channel through jackc/pgxlisten, on a dedicated connection (never
// a pooled one: a pool could hand the LISTENing session to other work, or
// close it, and the notifications would be lost).
//
// Notifications only trigger a claim; they carry no data, and any payload
// is accepted. Wake-ups are coalesced into a one-slot channel that the
// listener never blocks on. After every (re)connect the listener wakes the
// relay once, because notifications sent while it was disconnected are lost.
// A watchdog sends a ping notification every Config.PingInterval through
// the relay's pool and expects it back on the listening connection within
// Config.PingTimeout; otherwise it drops the connection and reconnects, so a
// half-open TCP connection cannot silently stop the wake-ups.
package notify

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgxlisten"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox/internal/config"
)

// Config configures a Listener.
type Config struct {
	// Channel is the channel to LISTEN on. Defaults to "outbox".
	Channel string
	// ReconnectMin is the first delay before reconnecting after the
	// connection failed; each failure in a row doubles it, with jitter, up to
	// ReconnectMax. Defaults to 100ms. (pgxlisten's own default is one
	// minute; this package manages the delay itself.)
	ReconnectMin time.Duration
	// ReconnectMax caps the reconnect delay. Defaults to 5s.
	ReconnectMax time.Duration
	// PingInterval is how often the watchdog checks that notifications
	// arrive. Defaults to 5s. Negative disables the watchdog.
	PingInterval time.Duration
	// PingTimeout is how long the watchdog waits for its ping to come back
	// before it reconnects. Defaults to 5s. With the watchdog on, connecting
	// and LISTEN together must also finish within PingInterval+PingTimeout,
	// or the attempt is abandoned and retried.
	PingTimeout time.Duration
}

// DefaultChannel is Config.Channel's default.
const DefaultChannel = "outbox"

// pingPrefix marks the watchdog's own notifications.
const pingPrefix = "pgoutbox-ping:"

// Defaults of Config.
const (
	DefaultReconnectMin = 100 * time.Millisecond
	DefaultReconnectMax = 5 * time.Second
	DefaultPingInterval = 5 * time.Second
	DefaultPingTimeout  = 5 * time.Second
)

// WithDefaults returns a copy of c with every zero field set to its
// default.
func (c Config) WithDefaults() Config {
	if c.Channel == "" {
		c.Channel = DefaultChannel
	}
	if c.ReconnectMin == 0 {
		c.ReconnectMin = DefaultReconnectMin
	}
	if c.ReconnectMax == 0 {
		c.ReconnectMax = DefaultReconnectMax
	}
	if c.PingInterval == 0 {
		c.PingInterval = DefaultPingInterval
	}
	if c.PingTimeout == 0 {
		c.PingTimeout = DefaultPingTimeout
	}
	return c
}

// Validate returns a *outbox.FieldError naming the first invalid field of c
// with its defaults applied; c itself is not changed.
func (c Config) Validate() error {
	c = c.WithDefaults()
	switch {
	case len(c.Channel) > 63:
		return config.Invalid("notify", "Channel", "%q is longer than 63 bytes (Postgres' NAMEDATALEN limit)", c.Channel)
	case c.ReconnectMin < 0:
		return config.Invalid("notify", "ReconnectMin", "must be positive, got %s", c.ReconnectMin)
	case c.ReconnectMax < c.ReconnectMin:
		return config.Invalid("notify", "ReconnectMax", "%s is less than Config.ReconnectMin %s", c.ReconnectMax, c.ReconnectMin)
	case c.PingTimeout < 0:
		return config.Invalid("notify", "PingTimeout", "must be positive, got %s", c.PingTimeout)
	}
	return nil
}

// Notifier sends a notification on a channel; *pgxpool.Pool satisfies it
// through Exec. The watchdog uses it to ping the listener.
type Notifier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// State is the listener's connection state.
type State int32

const (
	// StateConnecting: not listening yet, or reconnecting.
	StateConnecting State = iota
	// StateListening: LISTEN is active on the connection.
	StateListening
	// StateStopped: Run returned.
	StateStopped
)

func (s State) String() string {
	switch s {
	case StateConnecting:
		return "connecting"
	case StateListening:
		return "listening"
	case StateStopped:
		return "stopped"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Listener listens for wake-up notifications.
type Listener struct {
	cfg     Config
	connect func(ctx context.Context) (*pgx.Conn, error)
	pinger  Notifier
	log     *zap.Logger

	wake  chan struct{}
	state atomic.Int32

	mu       sync.Mutex
	pingSeq  uint64
	pingBack chan uint64 // pings seen on the connection

	notifications atomic.Int64
	reconnects    atomic.Int64
	// OnStateChange, if set before Run, is called (synchronously, from the
	// listener's goroutine) on every state change. For metrics and tests.
	OnStateChange func(State)
}

// New returns a Listener. connect must open a new, dedicated connection on
// each call (for example pgx.ConnectConfig with a parsed config); pinger,
// usually the relay's pool, sends the watchdog's pings (nil disables the
// watchdog). It returns cfg's validation error.
func New(cfg Config, connect func(ctx context.Context) (*pgx.Conn, error), pinger Notifier, logger *zap.Logger) (*Listener, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if connect == nil {
		return nil, errors.New("notify: connect is nil")
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	return &Listener{
		cfg:      cfg,
		connect:  connect,
		pinger:   pinger,
		log:      logger.Named("notify"),
		wake:     make(chan struct{}, 1),
		pingBack: make(chan uint64, 1),
	}, nil
}

// Wake returns the coalesced wake-up signal: one pending value at most, no
// matter how many notifications arrived since it was last read.
func (l *Listener) Wake() <-chan struct{} { return l.wake }

// State returns the current connection state.
func (l *Listener) State() State { return State(l.state.Load()) }

// Notifications returns how many notifications arrived (watchdog pings
// excluded).
func (l *Listener) Notifications() int64 { return l.notifications.Load() }

// Reconnects returns how many times the listener (re)established LISTEN.
func (l *Listener) Reconnects() int64 { return l.reconnects.Load() }

func (l *Listener) setState(s State) {
	if State(l.state.Swap(int32(s))) != s && l.OnStateChange != nil {
		l.OnStateChange(s)
	}
}

func (l *Listener) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Run listens until ctx is done, reconnecting with backoff after any
// failure, and returns ctx.Err().
func (l *Listener) Run(ctx context.Context) error {
	defer l.setState(StateStopped)
	failures := 0
	for {
		sessionCtx, cancel := context.WithCancel(ctx)
		established := make(chan struct{})
		pl := &pgxlisten.Listener{
			Connect: l.connect,
			LogError: func(_ context.Context, err error) {
				if ctx.Err() == nil {
					l.log.Warn("listener error", zap.Error(err))
				}
			},
		}
		h := &handler{l: l, established: established}
		pl.Handle(l.cfg.Channel, h)

		var wg sync.WaitGroup
		if l.pinger != nil && l.cfg.PingInterval > 0 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l.watchdog(sessionCtx, cancel, established)
			}()
		}
		// pgxlisten.Listen only returns on ctx done (it would otherwise
		// reconnect on its own after ReconnectDelay); run one session with
		// a negative delay and manage the backoff here instead.
		err := listenOnce(sessionCtx, pl)
		cancel()
		wg.Wait()
		if ctx.Err() != nil {
			return ctx.Err() // deferred: listening -> stopped, no connecting in between
		}
		l.setState(StateConnecting)
		select {
		case <-established:
			failures = 0
		default:
			failures++
		}
		delay := backoff(l.cfg.ReconnectMin, l.cfg.ReconnectMax, failures)
		l.log.Warn("listener disconnected; reconnecting", zap.Error(err), zap.Duration("delay", delay), zap.Int("failures", failures))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
	}
}

// listenOnce runs pgxlisten for a single connection: the first error ends
// it (pgxlisten logs it through LogError, and its own loop would retry).
func listenOnce(ctx context.Context, pl *pgxlisten.Listener) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var firstErr error
	var once sync.Once
	logErr := pl.LogError
	pl.LogError = func(c context.Context, err error) {
		once.Do(func() { firstErr = err })
		if logErr != nil {
			logErr(c, err)
		}
		cancel() // end this session; Run reconnects with backoff
	}
	pl.ReconnectDelay = -1
	_ = pl.Listen(sctx)
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

// watchdog pings the listener through the pool; if a ping does not come
// back within PingTimeout, it cancels the session so Run reconnects.
func (l *Listener) watchdog(ctx context.Context, cancel context.CancelFunc, established <-chan struct{}) {
	// Connecting and LISTEN can hang on a half-open connection too (the
	// reconnect after a missed ping often meets the same dead route), and
	// pgx has no connect timeout unless connect_timeout is set: give them
	// as long as the first ping would have to come back, then start over.
	setup := time.NewTimer(l.cfg.PingInterval + l.cfg.PingTimeout)
	select {
	case <-ctx.Done():
		setup.Stop()
		return
	case <-established:
		setup.Stop()
	case <-setup.C:
		select {
		case <-established: // just in time
		default:
			l.log.Warn("listener not connected in time; reconnecting", zap.Duration("timeout", l.cfg.PingInterval+l.cfg.PingTimeout))
			cancel()
			return
		}
	}
	t := time.NewTicker(l.cfg.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		l.mu.Lock()
		l.pingSeq++
		seq := l.pingSeq
		l.mu.Unlock()
		pctx, pcancel := context.WithTimeout(ctx, l.cfg.PingTimeout)
		_, err := l.pinger.Exec(pctx, "SELECT pg_notify($1, $2)", l.cfg.Channel, pingPrefix+strconv.FormatUint(seq, 10))
		if err != nil {
			pcancel()
			if ctx.Err() != nil {
				return
			}
			// The database itself is unreachable: the listener will notice
			// on its own connection; nothing to decide here.
			l.log.Debug("watchdog ping not sent", zap.Error(err))
			continue
		}
		ok := false
	wait:
		for {
			select {
			case got := <-l.pingBack:
				if got >= seq {
					ok = true
					break wait
				}
			case <-pctx.Done():
				break wait
			}
		}
		pcancel()
		if ctx.Err() != nil {
			return
		}
		if !ok {
			l.log.Warn("listener missed its watchdog ping; reconnecting", zap.Duration("ping_timeout", l.cfg.PingTimeout))
			cancel()
			return
		}
	}
}

type handler struct {
	l           *Listener
	established chan struct{}
}

// HandleBacklog runs once LISTEN is active on a new connection: wake the
// relay, because notifications sent while disconnected are lost.
func (h *handler) HandleBacklog(ctx context.Context, channel string, conn *pgx.Conn) error {
	h.l.reconnects.Add(1)
	close(h.established)
	h.l.setState(StateListening)
	h.l.log.Info("listening", zap.String("channel", channel), zap.Uint32("backend_pid", conn.PgConn().PID()))
	h.l.signal()
	return nil
}

func (h *handler) HandleNotification(ctx context.Context, n *pgconn.Notification, conn *pgx.Conn) error {
	if len(n.Payload) > len(pingPrefix) && n.Payload[:len(pingPrefix)] == pingPrefix {
		if seq, err := strconv.ParseUint(n.Payload[len(pingPrefix):], 10, 64); err == nil {
			select {
			case h.l.pingBack <- seq:
			default:
				// an older ping is pending: replace it with the newer one
				select {
				case <-h.l.pingBack:
				default:
				}
				select {
				case h.l.pingBack <- seq:
				default:
				}
			}
			return nil
		}
	}
	h.l.notifications.Add(1)
	h.l.signal()
	return nil
}

// backoff returns min·2^(failures-1) with ±20% jitter, capped at max; 0
// failures gives min (a clean disconnect still waits a little).
func backoff(min, max time.Duration, failures int) time.Duration {
	d := min
	for i := 1; i < failures && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	jitter := time.Duration(float64(d) * (rand.Float64()*0.4 - 0.2))
	return d + jitter
}
