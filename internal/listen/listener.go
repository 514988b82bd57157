// Package listen wakes the relay when events are committed: it LISTENs on a
// Postgres channel through jackc/pgxlisten, on a dedicated connection (never
// a pooled one: a pool could hand the LISTENing session to other work, or
// close it, and the notifications would be lost).
//
// Notifications only trigger a claim; they carry no events. A payload
// that names key partitions ("kp:3,17", config.KeyPartitionsPrefix) wakes
// the relay only if it owns one of them (Listener.Wants), so that a relay
// among several is not woken for the others' events; any other payload
// wakes it; a relay's poll names the partitions of what it found for
// others the same way (config.PollWakePrefix). Wake-ups are coalesced into a one-slot channel that the
// listener never blocks on. After every (re)connect the listener wakes the
// relay once, because notifications sent while it was disconnected are lost.
// A watchdog sends a ping notification every Config.PingInterval through
// the relay's pool and expects it back on the listening connection within
// Config.PingTimeout; otherwise it drops the connection and reconnects, so a
// half-open TCP connection cannot silently stop the wake-ups.
//
// Every new connection is checked before it counts as listening:
//
//   - pg_is_in_recovery() first: a hot standby cannot LISTEN, so the
//     listener reports StateStandby (one log line, Reason names the server)
//     and retries with backoff until the server is promoted;
//   - with the watchdog on, a probe ping right after LISTEN must come back
//     within Config.PingTimeout. A connection that LISTENs without error but
//     never hears its probe is deaf: a transaction pooler such as PgBouncer
//     (pool_mode=transaction) ran the LISTEN on a server connection that it
//     then gave to other clients. The listener reports StateDeaf (one log
//     line; Reason says why and what to do) at once when the session shows a
//     pooler (the backend's PID is not the one announced at connect, or it
//     changes between statements), or after Config.DeafAfter such
//     connections in a row otherwise, and then tries a new connection every
//     Config.DeafRetry. The relay finds events by polling meanwhile.
//
// Its configuration is notify.Config.
package listen

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgxlisten"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox/internal/backoff"
	"github.com/pgoutbox/outbox/internal/config"
	"github.com/pgoutbox/outbox/notify"
)

// pingPrefix marks the watchdog's own notifications.
const pingPrefix = "pgoutbox-ping:"

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
	// StateDeaf: connections LISTEN without error but do not receive the
	// notifications sent through the pinger (see the package
	// documentation); Reason says why. The listener tries a new connection
	// every Config.DeafRetry and is listening again once one hears its
	// probe.
	StateDeaf
	// StateStandby: the listener's server is a hot standby
	// (pg_is_in_recovery()), where LISTEN cannot run; Reason names the
	// server. The listener retries with backoff until it is promoted (or
	// the connection leads to a primary).
	StateStandby
)

// String returns the state's name: "connecting", "listening", "stopped",
// "deaf" or "standby".
func (s State) String() string {
	switch s {
	case StateConnecting:
		return "connecting"
	case StateListening:
		return "listening"
	case StateStopped:
		return "stopped"
	case StateDeaf:
		return "deaf"
	case StateStandby:
		return "standby"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Listener listens for wake-up notifications.
type Listener struct {
	cfg     notify.Config
	connect func(ctx context.Context) (*pgx.Conn, error)
	pinger  Notifier
	log     *zap.Logger

	wake  chan struct{}
	state atomic.Int32

	mu       sync.Mutex
	pingSeq  uint64
	pingBack chan uint64 // pings seen on the connection

	notifications atomic.Int64
	ignored       atomic.Int64
	untargeted    atomic.Int64
	reconnects    atomic.Int64
	// signals counts the wake-ups signalled (notifications, reconnects),
	// pollSignals those of them that a relay's poll sent (Wakeups).
	signals, pollSignals atomic.Int64
	// silent counts the connections in a row that LISTENed but did not
	// hear their probe; only Run's goroutine (where pgxlisten calls the
	// handler) touches it.
	silent int
	// reason says why the state is deaf or standby ("" otherwise).
	reason atomic.Pointer[string]
	// storm is the reconnect storm under way (storm.go); only Run's
	// goroutine touches it.
	storm storm
	// Wants, if set before Run, reports whether the relay owns key
	// partition p: a notification that names key partitions wakes the
	// relay only if Wants is true for one of them. It is called from the
	// listener's goroutine and must be safe for concurrent use. Nil: every
	// notification wakes the relay.
	Wants func(p int) bool
	// OnStateChange, if set before Run, is called (synchronously, from the
	// listener's goroutine) on every state change. For metrics and tests.
	OnStateChange func(State)
}

// New returns a Listener. connect must open a new, dedicated connection on
// each call (for example pgx.ConnectConfig with a parsed config); pinger,
// usually the relay's pool, sends the watchdog's pings (nil disables the
// watchdog). It returns cfg's validation error.
func New(cfg notify.Config, connect func(ctx context.Context) (*pgx.Conn, error), pinger Notifier, logger *zap.Logger) (*Listener, error) {
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

// Ignored returns how many notifications named only key partitions the
// relay does not own, and so did not wake it (counted in Notifications
// too).
func (l *Listener) Ignored() int64 { return l.ignored.Load() }

// Untargeted returns how many notifications named no key partitions (an
// empty payload, or any other that is not a list of them): such a
// notification may stand for events of every relay's partitions, and for
// more committed after it without one (a debounced writer's).
func (l *Listener) Untargeted() int64 { return l.untargeted.Load() }

// Wakeups returns how many wake-ups the listener signalled (every
// notification that woke the relay, and every reconnect) and how many of
// them were notifications of another relay's shared poll
// (config.PollWakePrefix): a relay counts a wake-up in which only such
// notifications arrived as a poll's.
func (l *Listener) Wakeups() (all, poll int64) {
	return l.signals.Load(), l.pollSignals.Load()
}

// Reconnects returns how many times the listener (re)established LISTEN,
// deaf connections included.
func (l *Listener) Reconnects() int64 { return l.reconnects.Load() }

// Reason says why the listener does not listen, in StateDeaf ("LISTEN is
// not receiving notifications: <Config.DeafHint> (<evidence>)") and in
// StateStandby (the StandbyError's text); "" in the other states.
func (l *Listener) Reason() string {
	if r := l.reason.Load(); r != nil {
		return *r
	}
	return ""
}

func (l *Listener) setReason(r string) { l.reason.Store(&r) }

func (l *Listener) setState(s State) {
	if State(l.state.Swap(int32(s))) != s && l.OnStateChange != nil {
		l.OnStateChange(s)
	}
}

// notified counts a notification with payload and wakes the relay unless
// the payload names only key partitions it does not own.
func (l *Listener) notified(payload string) {
	l.notifications.Add(1)
	rest, polled := strings.CutPrefix(payload, config.PollWakePrefix)
	named, wanted := keyPartitions(rest, l.Wants)
	switch {
	case !named && !polled && payload != config.MembersPayload:
		l.untargeted.Add(1)
	case named && !wanted:
		l.ignored.Add(1)
		return
	}
	if polled {
		l.pollSignals.Add(1)
	}
	l.signal()
}

// keyPartitions reports whether payload is a well-formed list of key
// partitions (config.KeyPartitionsPrefix), and if so whether wants (nil:
// any) is true for one of them.
func keyPartitions(payload string, wants func(p int) bool) (named, wanted bool) {
	rest, ok := strings.CutPrefix(payload, config.KeyPartitionsPrefix)
	if !ok || rest == "" {
		return false, false
	}
	for f := range strings.SplitSeq(rest, ",") {
		if p, err := strconv.Atoi(f); err != nil || p < 0 {
			return false, false
		}
	}
	if wants == nil {
		return true, true
	}
	for f := range strings.SplitSeq(rest, ",") {
		if p, _ := strconv.Atoi(f); wants(p) {
			return true, true
		}
	}
	return true, false
}

func (l *Listener) signal() {
	l.signals.Add(1)
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// StandbyError is the error of a connection whose server is a hot standby
// (pg_is_in_recovery() is true): LISTEN cannot run during recovery. The
// listener reports it as StateStandby.
type StandbyError struct {
	// Addr is the server's address as the connection reached it
	// (host:port, or the unix socket's path).
	Addr string
}

// Error says "connected to a standby (in recovery) at <Addr>".
func (e *StandbyError) Error() string {
	return "connected to a standby (in recovery) at " + e.Addr + ": LISTEN cannot run there until it is promoted"
}

// ServerAddr returns the address conn reached: the remote host:port, or
// the unix socket's path.
func ServerAddr(conn *pgconn.PgConn) string {
	if nc := conn.Conn(); nc != nil && nc.RemoteAddr() != nil {
		if a := nc.RemoteAddr().String(); a != "" {
			return a
		}
	}
	return "unknown address"
}

// errDeaf ends a session whose probe did not come back.
var errDeaf = errors.New("probe notification not received")

// Run listens until ctx is done, reconnecting with backoff after any
// failure, and returns ctx.Err().
func (l *Listener) Run(ctx context.Context) error {
	defer l.setState(StateStopped)
	failures := 0
	for {
		sessionCtx, cancel := context.WithCancel(ctx)
		established := make(chan struct{})
		h := &handler{l: l, established: established}
		pl := &pgxlisten.Listener{
			Connect: h.connect,
			// The error that ends a session is logged by afterSession,
			// with what the listener does about it.
			LogError: func(_ context.Context, err error) {
				var se *StandbyError
				if ctx.Err() == nil && !errors.As(err, &se) && !errors.Is(err, errDeaf) {
					l.log.Debug("listener error", zap.Error(err))
				}
			},
		}
		pl.Handle(l.cfg.Channel, h)

		var wg sync.WaitGroup
		if l.probing() {
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
		select {
		case <-established:
			failures = 0
		default:
			failures++
		}
		delay := l.afterSession(err, failures)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
	}
}

// afterSession sets the state after a session ended with err, logs the
// change, and returns the delay before the next connection.
func (l *Listener) afterSession(err error, failures int) time.Duration {
	delay := backoff.Delay(l.cfg.ReconnectMin, l.cfg.ReconnectMax, failures)
	var se *StandbyError
	switch {
	case errors.As(err, &se):
		if l.State() != StateStandby || l.Reason() != se.Error() {
			l.setReason(se.Error())
			l.setState(StateStandby)
			l.log.Error("the listener's server is a standby (in recovery): LISTEN cannot run there; retrying until it is promoted",
				zap.String("server", se.Addr))
		}
		l.log.Debug("listener still on a standby; retrying", zap.String("server", se.Addr), zap.Duration("delay", delay))
		return delay
	case errors.Is(err, errDeaf) && l.State() == StateDeaf:
		l.log.Debug("listener still deaf; retrying", zap.Duration("delay", l.cfg.DeafRetry))
		return l.cfg.DeafRetry
	case errors.Is(err, errDeaf):
		l.log.Warn("listener did not receive its probe notification; reconnecting",
			zap.Duration("ping_timeout", l.cfg.PingTimeout), zap.Int("connections_in_a_row", l.silent), zap.Int("deaf_after", l.cfg.DeafAfter),
			zap.Duration("delay", delay))
		return delay
	}
	l.setState(StateConnecting)
	l.logDisconnect(err, delay, failures)
	return delay
}

// probing reports whether new connections are probed and watched.
func (l *Listener) probing() bool { return l.pinger != nil && l.cfg.PingInterval > 0 }

// listenOnce runs pgxlisten for a single connection: the first error ends
// it (pgxlisten logs it through LogError, and its own loop would retry).
func listenOnce(ctx context.Context, pl *pgxlisten.Listener) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var firstErr error
	var once sync.Once
	logErr := pl.LogError
	pl.LogError = func(c context.Context, err error) {
		first := false
		once.Do(func() { firstErr, first = err, true })
		if first && logErr != nil {
			logErr(c, err) // later errors follow from it (the cancel below)
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

// nextPing returns the sequence number of a new ping.
func (l *Listener) nextPing() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pingSeq++
	return l.pingSeq
}

// sendPing notifies the channel with ping seq through the pinger.
func (l *Listener) sendPing(ctx context.Context, seq uint64) error {
	_, err := l.pinger.Exec(ctx, "SELECT pg_notify($1, $2)", l.cfg.Channel, pingPrefix+strconv.FormatUint(seq, 10))
	return err
}

// watchdog pings the listener through the pool; if a ping does not come
// back within PingTimeout, it cancels the session so Run reconnects.
func (l *Listener) watchdog(ctx context.Context, cancel context.CancelFunc, established <-chan struct{}) {
	// Connecting and LISTEN can hang on a half-open connection too (the
	// reconnect after a missed ping often meets the same dead route), and
	// pgx has no connect timeout unless connect_timeout is set: give them
	// as long as the first ping would have to come back, plus the probe,
	// then start over.
	limit := l.cfg.PingInterval + 2*l.cfg.PingTimeout
	setup := time.NewTimer(limit)
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
			l.log.Warn("listener not connected in time; reconnecting", zap.Duration("timeout", limit))
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
		seq := l.nextPing()
		pctx, pcancel := context.WithTimeout(ctx, l.cfg.PingTimeout)
		if err := l.sendPing(pctx, seq); err != nil {
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
