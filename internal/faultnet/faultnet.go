// Package faultnet is a net.Listener for tests that can refuse, cut or
// stall the connections of a server in the same process (for example a
// kfake broker through kfake.ListenFn), so tests can take a broker "down"
// and bring it back on the same address.
package faultnet

import (
	"net"
	"sync"
	"time"
)

// Mode is how the listener treats connections.
type Mode int

const (
	// Up passes traffic normally.
	Up Mode = iota
	// Refuse closes every open connection and closes new ones as soon as
	// they are accepted (the client sees a reset or EOF).
	Refuse
	// Blackhole keeps connections open but passes no bytes: reads block
	// and writes are swallowed, like a peer behind a dropped route.
	Blackhole
)

// Listener wraps a net.Listener.
type Listener struct {
	net.Listener
	mu    sync.Mutex
	mode  Mode
	conns map[*conn]struct{}
	cond  *sync.Cond
}

// Listen opens a TCP listener on addr (use "127.0.0.1:0").
func Listen(network, addr string) (*Listener, error) {
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	l := &Listener{Listener: ln, conns: map[*conn]struct{}{}}
	l.cond = sync.NewCond(&l.mu)
	return l, nil
}

// SetMode switches the mode. Switching to Refuse closes all open
// connections; switching away from Blackhole lets stalled reads go on (the
// bytes written meanwhile were dropped, so protocols usually fail and
// reconnect, which is what a real network partition does too).
func (l *Listener) SetMode(m Mode) {
	l.mu.Lock()
	l.mode = m
	var toClose []*conn
	if m == Refuse {
		for c := range l.conns {
			toClose = append(toClose, c)
		}
	}
	l.cond.Broadcast()
	l.mu.Unlock()
	for _, c := range toClose {
		_ = c.Close()
	}
}

// Accept waits for and returns the next connection.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		if l.mode == Refuse {
			l.mu.Unlock()
			_ = nc.Close()
			continue
		}
		c := &conn{Conn: nc, l: l}
		l.conns[c] = struct{}{}
		l.mu.Unlock()
		return c, nil
	}
}

// Close closes the listener and every connection it accepted.
func (l *Listener) Close() error {
	err := l.Listener.Close()
	l.mu.Lock()
	var all []*conn
	for c := range l.conns {
		all = append(all, c)
	}
	l.mu.Unlock()
	for _, c := range all {
		_ = c.Close()
	}
	return err
}

type conn struct {
	net.Conn
	l      *Listener
	once   sync.Once
	closed bool
}

// wait blocks while the listener is in Blackhole mode; it returns false if
// the connection was closed meanwhile.
func (c *conn) wait() bool {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	for c.l.mode == Blackhole && !c.closed {
		c.l.cond.Wait()
	}
	return !c.closed
}

func (c *conn) Read(p []byte) (int, error) {
	for {
		if !c.wait() {
			return 0, net.ErrClosed
		}
		n, err := c.Conn.Read(p)
		if err != nil {
			return n, err
		}
		c.l.mu.Lock()
		bh := c.l.mode == Blackhole
		c.l.mu.Unlock()
		if !bh {
			return n, nil
		}
		// Arrived while blackholed: dropped.
	}
}

func (c *conn) Write(p []byte) (int, error) {
	c.l.mu.Lock()
	bh := c.l.mode == Blackhole
	c.l.mu.Unlock()
	if bh {
		return len(p), nil // swallowed
	}
	return c.Conn.Write(p)
}

func (c *conn) Close() error {
	var err error
	c.once.Do(func() {
		c.l.mu.Lock()
		c.closed = true
		delete(c.l.conns, c)
		c.l.cond.Broadcast()
		c.l.mu.Unlock()
		err = c.Conn.Close()
	})
	return err
}

// SetReadDeadline is passed through, but a blackholed read ignores it
// (a real blackhole does not honor the server's deadlines either).
func (c *conn) SetReadDeadline(t time.Time) error { return c.Conn.SetReadDeadline(t) }
