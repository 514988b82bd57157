// Package notify configures how the relay hears about committed events:
// the Postgres channel it LISTENs on (the one the writers notify), how it
// reconnects, and how it tells a connection that hears nothing (a
// transaction pooler) from a quiet one. relay.ServiceConfig.Notify is a
// Config; the listener itself is internal (internal/listen).
package notify

import (
	"time"

	"github.com/pgoutbox/outbox/internal/config"
)

// Config configures the relay's LISTEN connection (relay.ServiceConfig.Notify).
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
	// before it reconnects, and how long a new connection waits for its
	// probe ping. Defaults to 5s. With the watchdog on, connecting, LISTEN
	// and the probe together must also finish within
	// PingInterval+2*PingTimeout, or the attempt is abandoned and retried.
	PingTimeout time.Duration
	// DeafAfter is how many connections in a row may LISTEN without error
	// and still not receive their probe ping before the listener reports
	// StateDeaf, when nothing shows a pooler in between (with a pooler,
	// the first such connection is enough). Defaults to 3. Needs the
	// watchdog.
	DeafAfter int
	// DeafRetry is how often a deaf listener tries a new connection to see
	// whether notifications arrive again. Defaults to 30s.
	DeafRetry time.Duration
	// DeafHint is the advice of the deaf report (the log line and Reason),
	// after "LISTEN is not receiving notifications: ". Defaults to
	// DefaultDeafHint; the outbox-relay command names its flags instead.
	DeafHint string
}

// Defaults of Config.
const (
	DefaultReconnectMin = 100 * time.Millisecond
	DefaultReconnectMax = 5 * time.Second
	DefaultPingInterval = 5 * time.Second
	DefaultPingTimeout  = 5 * time.Second
	DefaultDeafAfter    = 3
	DefaultDeafRetry    = 30 * time.Second
	DefaultDeafHint     = "does the listener's connection go through a transaction pooler (PgBouncer pool_mode=transaction)? connect the listener directly to PostgreSQL"
)

// WithDefaults returns a copy of c with every zero field set to its
// default.
func (c Config) WithDefaults() Config {
	if c.Channel == "" {
		c.Channel = config.DefaultChannel
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
	if c.DeafAfter == 0 {
		c.DeafAfter = DefaultDeafAfter
	}
	if c.DeafRetry == 0 {
		c.DeafRetry = DefaultDeafRetry
	}
	if c.DeafHint == "" {
		c.DeafHint = DefaultDeafHint
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
	case c.DeafAfter < 0:
		return config.Invalid("notify", "DeafAfter", "must be positive, got %d", c.DeafAfter)
	case c.DeafRetry < 0:
		return config.Invalid("notify", "DeafRetry", "must be positive, got %s", c.DeafRetry)
	}
	return nil
}
