package listen

// One LISTEN session: the checks of a new connection (standby, probe,
// deaf detection) and its notifications.

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"
)

// handler is one session's: it checks the new connection (connect), probes
// it once LISTEN runs (HandleBacklog) and handles its notifications.
type handler struct {
	l           *Listener
	established chan struct{}
	// pidBefore is pg_backend_pid() before LISTEN, set by connect.
	pidBefore uint32
}

// connect opens the session's connection and refuses a server in
// recovery, where LISTEN cannot run (*StandbyError).
func (h *handler) connect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := h.l.connect(ctx)
	if err != nil {
		return nil, err
	}
	var rec bool
	// The simple protocol: no prepared statement, whatever the
	// connection's exec mode and whatever pooler is in between.
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery(), pg_backend_pid()", pgx.QueryExecModeSimpleProtocol).Scan(&rec, &h.pidBefore); err != nil {
		_ = conn.Close(ctx)
		return nil, fmt.Errorf("check recovery: %w", err)
	}
	if rec {
		addr := ServerAddr(conn.PgConn())
		_ = conn.Close(ctx)
		return nil, &StandbyError{Addr: addr}
	}
	return conn, nil
}

// HandleBacklog runs once LISTEN is active on a new connection: with the
// watchdog on, it probes the connection first (a deaf one ends the session
// with errDeaf); then it wakes the relay, because notifications sent while
// disconnected are lost.
func (h *handler) HandleBacklog(ctx context.Context, channel string, conn *pgx.Conn) error {
	h.l.reconnects.Add(1)
	verified := false
	if h.l.probing() {
		heard, err := h.probe(ctx, conn)
		if err != nil {
			return err
		}
		verified = heard
	}
	h.l.silent = 0
	was := h.l.State()
	close(h.established)
	h.l.setReason("")
	h.l.setState(StateListening)
	fields := []zap.Field{zap.String("channel", channel), zap.Uint32("backend_pid", conn.PgConn().PID()), zap.Bool("probe_received", verified)}
	if was == StateDeaf || was == StateStandby {
		fields = append(fields, zap.Stringer("was", was))
	}
	if h.l.storm.on {
		h.l.log.Debug("listening", fields...) // the storm was said once
	} else {
		h.l.log.Info("listening", fields...)
	}
	h.l.signal()
	return nil
}

// probe sends a ping through the pinger and waits for it on conn, handling
// the other notifications that arrive meanwhile. heard is true when it came
// back; false with a nil error when the ping could not be sent (nothing is
// known then: the connection counts as listening and the watchdog checks
// again later). A ping that was sent and did not come back within
// PingTimeout makes the connection deaf: probe records it and returns
// errDeaf. Other errors are conn's failures.
func (h *handler) probe(ctx context.Context, conn *pgx.Conn) (heard bool, err error) {
	l := h.l
	// No statement after LISTEN while the connection is healthy: its
	// pg_stat_activity.query stays the LISTEN, which names the channel.
	seq := l.nextPing()
	pctx, cancel := context.WithTimeout(ctx, l.cfg.PingTimeout)
	defer cancel()
	if err := l.sendPing(pctx, seq); err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		l.log.Debug("probe ping not sent; listening unverified", zap.Error(err))
		return false, nil
	}
	for {
		n, err := conn.WaitForNotification(pctx)
		if err != nil {
			if ctx.Err() != nil || pctx.Err() == nil {
				return false, err
			}
			break // timed out: the connection is still usable
		}
		if got, ok := pingSeq(n.Payload); ok {
			if got >= seq {
				return true, nil
			}
			continue
		}
		l.notified(n.Payload)
	}
	pidLater, err := backendPID(ctx, conn)
	if err != nil {
		return false, err
	}
	l.deafConnection(h.pidBefore, pidLater, conn.PgConn().PID())
	return false, errDeaf
}

// backendPID returns pg_backend_pid() of the server connection that runs
// the statement.
func backendPID(ctx context.Context, conn *pgx.Conn) (uint32, error) {
	var pid uint32
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()", pgx.QueryExecModeSimpleProtocol).Scan(&pid); err != nil {
		return 0, fmt.Errorf("backend pid: %w", err)
	}
	return pid, nil
}

// deafConnection records a connection that did not hear its probe, given
// the backend PIDs seen before LISTEN and after the probe, and the PID
// announced at connect, and enters StateDeaf (one log line) when that is
// enough evidence.
func (l *Listener) deafConnection(before, after, announced uint32) {
	l.silent++
	var evidence string
	switch {
	case before != after:
		evidence = fmt.Sprintf("the session moved between server connections (backend PID %d before LISTEN, %d after it): a transaction pooler", before, after)
	case after != announced:
		evidence = fmt.Sprintf("a pooler answers for the server (backend PID %d, but %d was announced at connect), and the probe notification sent through the relay's pool did not come back within %s", after, announced, l.cfg.PingTimeout)
	case l.silent >= l.cfg.DeafAfter:
		evidence = fmt.Sprintf("%d connections in a row received none of the probe notifications sent through the relay's pool within %s (a pooler, or another database than the pool's?)", l.silent, l.cfg.PingTimeout)
	default:
		return
	}
	if l.State() == StateDeaf {
		return
	}
	reason := "LISTEN is not receiving notifications: " + l.cfg.DeafHint + " (" + evidence + ")"
	l.setReason(reason)
	l.setState(StateDeaf)
	l.log.Error("LISTEN is not receiving notifications: "+l.cfg.DeafHint+"; wake-ups come from polling only meanwhile",
		zap.String("evidence", evidence), zap.String("channel", l.cfg.Channel), zap.Duration("retry_every", l.cfg.DeafRetry))
}

// pingSeq parses a watchdog ping's payload.
func pingSeq(payload string) (uint64, bool) {
	rest, ok := strings.CutPrefix(payload, pingPrefix)
	if !ok || rest == "" {
		return 0, false
	}
	seq, err := strconv.ParseUint(rest, 10, 64)
	return seq, err == nil
}

// HandleNotification counts a notification and wakes the relay unless it
// names only key partitions the relay does not own (Listener.Wants); a
// watchdog ping goes to the watchdog instead.
func (h *handler) HandleNotification(ctx context.Context, n *pgconn.Notification, conn *pgx.Conn) error {
	if seq, ok := pingSeq(n.Payload); ok {
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
	h.l.notified(n.Payload)
	return nil
}
