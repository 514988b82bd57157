package listen

import (
	"time"

	"go.uber.org/zap"
)

// stormWindow: a disconnect less than this after the previous one
// continues a reconnect storm; a storm ends when the connection has stayed
// up this long.
const stormWindow = time.Minute

// storm tracks disconnects that follow each other closely: something
// closes the listener's connection again and again (the database's
// idle_session_timeout, which the relay turns off for its own sessions;
// a proxy or a pooler closing idle connections). A storm logs the first
// disconnect and one line saying it goes on; the rest are debug, so the
// log says what happens once instead of twice per disconnect.
type storm struct {
	began, last time.Time // the storm's first disconnect, the previous one
	disconnects int       // disconnects in the storm so far
	on          bool      // the storm line was logged: the rest are debug
}

// logDisconnect logs a session that ended with err, once per storm.
// failures counts the connection attempts in a row that ended before the
// session was up (0: it was up): the database restarting or unreachable,
// not something closing idle connections, so they are no storm: the
// first in a row is a warning, the rest are debug.
func (l *Listener) logDisconnect(err error, delay time.Duration, failures int) {
	if failures > 0 {
		if failures == 1 {
			l.log.Warn("listener could not connect; retrying", zap.Error(err), zap.Duration("delay", delay))
		} else {
			l.log.Debug("listener could not connect again; retrying", zap.Error(err), zap.Int("failures", failures), zap.Duration("delay", delay))
		}
		return
	}
	s := &l.storm
	now := time.Now()
	if now.Sub(s.last) >= stormWindow {
		s.began, s.disconnects, s.on = now, 0, false
	}
	s.last = now
	s.disconnects++
	switch {
	case s.disconnects == 1:
		l.log.Warn("listener disconnected; reconnecting", zap.Error(err), zap.Duration("delay", delay))
	case !s.on:
		s.on = true
		l.log.Warn("listener keeps disconnecting; later disconnects are logged at debug level until it stays connected for 1m: does something close idle connections (idle_session_timeout, a proxy, a pooler)?",
			zap.Error(err), zap.Int("disconnects", s.disconnects), zap.Duration("within", now.Sub(s.began).Round(time.Millisecond)), zap.Duration("delay", delay))
	default:
		l.log.Debug("listener disconnected again; reconnecting", zap.Error(err), zap.Int("disconnects", s.disconnects), zap.Duration("delay", delay))
	}
}
