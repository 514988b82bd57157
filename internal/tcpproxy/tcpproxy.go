// Package tcpproxy is a TCP proxy for fault tests: it forwards connections
// from a local address to a target and can refuse, cut, blackhole or delay
// them on demand, so a test can break the network between a client (for
// example a Postgres connection) and its server without touching either.
// For Kafka clients it can also hold back requests of one API key
// (HoldKafka) and deliver them late.
//
// It is for tests only.
package tcpproxy

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

type mode int

const (
	modeNormal mode = iota
	modeRefuse
	modeBlackhole
)

// Proxy forwards every connection accepted on Addr to the target.
type Proxy struct {
	target   string
	ln       net.Listener
	ctx      context.Context // cancelled by Close; bounds upstream dials
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	accepted atomic.Int64
	dropped  atomic.Int64 // bytes read while blackholed, never forwarded
	held     atomic.Int64 // closes held back while blackholed
	frames   atomic.Int64 // frames of the held API key held so far

	mu      sync.Mutex
	mode    mode
	delay   time.Duration
	hold    *kafkaHold    // nil unless HoldKafka is on
	changed chan struct{} // closed and replaced on every mode change
	pairs   map[*pair]struct{}
	closed  bool
}

// New starts a proxy listening on 127.0.0.1 at a random port that forwards
// to target (host:port). Close it when done.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		target:  target,
		ln:      ln,
		ctx:     ctx,
		cancel:  cancel,
		changed: make(chan struct{}),
		pairs:   make(map[*pair]struct{}),
	}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr returns the proxy's listening address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Accepted returns how many connections the proxy accepted so far,
// including those it closed at once because it was refusing.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// Dropped returns how many bytes the proxy has read and dropped because it
// was blackholed: a test waits for it to grow to know its traffic reached
// the blackhole.
func (p *Proxy) Dropped() int64 { return p.dropped.Load() }

// HeldCloses returns how many closes (EOFs) the proxy has held back because
// it was blackholed.
func (p *Proxy) HeldCloses() int64 { return p.held.Load() }

// Conns returns how many proxied connections are open.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pairs)
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines to end.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	_ = p.ln.Close()
	p.closeAll()
	p.wg.Wait()
}

// Refuse closes every current connection and, until Restore, resets new
// ones as soon as they are accepted (the client's dial may succeed, but
// its first read fails).
func (p *Proxy) Refuse() {
	p.setMode(modeRefuse)
	p.closeAll()
}

// Cut closes every current connection (both sides see EOF) but keeps
// accepting and forwarding new ones. "Current" means accepted by the proxy:
// a client whose dial has just returned may still sit in the kernel's
// accept queue; wait for Accepted to count it first if that matters.
func (p *Proxy) Cut() { p.closeAll() }

// Blackhole keeps every connection open, and accepts new ones, but
// forwards nothing in either direction until Restore: bytes read from
// either side are dropped (not delivered later), and a close by either
// side is held back, so both peers hang like peers behind a dropped
// route. After Restore, bytes sent from then on flow again; since those
// dropped meanwhile are lost, protocols usually fail on such connections.
func (p *Proxy) Blackhole() { p.setMode(modeBlackhole) }

// Delay adds d of latency to every chunk forwarded from now on, in either
// direction (a round trip through the proxy takes at least 2·d more).
// Chunks are pipelined, so throughput is kept. Zero removes the delay.
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// Restore returns to normal forwarding: no refusal, no blackhole, no
// delay, no Kafka hold (it calls ReleaseHeld).
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.delay = 0
	p.mu.Unlock()
	p.ReleaseHeld()
	p.setMode(modeNormal)
}

// kafkaHold is one HoldKafka period: the API key to hold and the channel
// ReleaseHeld closes.
type kafkaHold struct {
	apiKey   int16
	released chan struct{}
}

// HoldKafka holds Kafka requests with apiKey (0 is Produce) until
// ReleaseHeld: the proxy reads the client-to-server direction of every
// connection as Kafka request frames (a 4-byte big-endian size, then the
// request, which starts with its int16 API key), and once a connection
// sends a frame with apiKey, that frame and every byte the client sends
// after it on that connection are buffered, not forwarded. Frames before
// it, the server's answers and other connections keep flowing; a client's
// close after held bytes is held too. Calling it again while holding
// changes the key for frames arriving from then on. Frame boundaries are
// tracked from each connection's first byte, so the proxy must be in
// front of a Kafka listener (a frame whose header straddles the call may
// be held with its first bytes already forwarded).
func (p *Proxy) HoldKafka(apiKey int16) {
	p.mu.Lock()
	defer p.mu.Unlock()
	released := make(chan struct{})
	if p.hold != nil {
		released = p.hold.released
	}
	p.hold = &kafkaHold{apiKey: apiKey, released: released}
}

// HeldFrames returns how many frames with the held API key the proxy has
// held so far, over all HoldKafka periods: a test waits for it to grow to
// know a request is being held.
func (p *Proxy) HeldFrames() int64 { return p.frames.Load() }

// ReleaseHeld ends HoldKafka: every connection's held bytes are delivered
// to the server, in order, then the held close if any, and forwarding
// goes on as normal. Without a hold it does nothing.
func (p *Proxy) ReleaseHeld() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hold != nil {
		close(p.hold.released)
		p.hold = nil
	}
}

func (p *Proxy) kafkaHold() *kafkaHold {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hold
}

func (p *Proxy) setMode(m mode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode != m {
		p.mode = m
		close(p.changed)
		p.changed = make(chan struct{})
	}
}

func (p *Proxy) state() (mode, time.Duration, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode, p.delay, p.changed
}

// closeAll closes every connection, including those still being set up.
func (p *Proxy) closeAll() {
	p.mu.Lock()
	pairs := make([]*pair, 0, len(p.pairs))
	for c := range p.pairs {
		pairs = append(pairs, c)
	}
	p.mu.Unlock()
	for _, c := range pairs {
		c.close()
	}
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		conn, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		p.accepted.Add(1)
		p.wg.Add(1)
		go p.handle(conn)
	}
}

// reset closes c with an RST rather than a FIN where possible.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

func (p *Proxy) handle(client net.Conn) {
	defer p.wg.Done()
	// Register before dialing the target, so that Refuse, Cut and Close
	// also end connections still being set up.
	c := &pair{client: client, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed || p.mode == modeRefuse {
		p.mu.Unlock()
		reset(client)
		return
	}
	p.pairs[c] = struct{}{}
	p.mu.Unlock()
	defer func() {
		c.close()
		p.mu.Lock()
		delete(p.pairs, c)
		p.mu.Unlock()
	}()

	var d net.Dialer
	server, err := d.DialContext(p.ctx, "tcp", p.target)
	if err != nil {
		c.reset()
		return
	}
	if !c.setServer(server) {
		return // closed meanwhile
	}

	var wg sync.WaitGroup
	wg.Add(2)
	var halfClosed atomic.Int32
	for _, dir := range [][2]net.Conn{{client, server}, {server, client}} {
		go func() {
			defer wg.Done()
			var fr *requests // Kafka frames are tracked client to server
			if dir[0] == client {
				fr = &requests{}
			}
			if p.pipe(c, dir[0], dir[1], fr) && halfClosed.Add(1) < 2 {
				return // the other direction still runs
			}
			c.close()
		}()
	}
	wg.Wait()
}

// pair is one proxied connection: the accepted client side and the dialed
// server side (nil until dialed).
type pair struct {
	client net.Conn
	done   chan struct{}

	mu     sync.Mutex
	server net.Conn
	closed bool
}

// setServer records the dialed server side; if the pair was closed
// meanwhile, it closes server and returns false.
func (c *pair) setServer(server net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		_ = server.Close()
		return false
	}
	c.server = server
	return true
}

func (c *pair) close() { c.closeWith(false) }

// reset closes the client side with an RST.
func (c *pair) reset() { c.closeWith(true) }

func (c *pair) closeWith(rst bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	close(c.done)
	if rst {
		reset(c.client)
	} else {
		_ = c.client.Close()
	}
	if c.server != nil {
		_ = c.server.Close()
	}
}

type chunk struct {
	b   []byte
	due time.Time
	// release, when not nil, holds the chunk (and every later one) back
	// until it is closed (HoldKafka).
	release <-chan struct{}
}

// heldBack reports whether ck must wait for its release.
func (ck chunk) heldBack() bool {
	if ck.release == nil {
		return false
	}
	select {
	case <-ck.release:
		return false
	default:
		return true
	}
}

// requests tracks the Kafka request frames of a client's byte stream.
type requests struct {
	left    int     // bytes left of the current frame after its header
	hdr     [6]byte // the next frame's size and API key, as read so far
	n       int     // bytes in hdr
	emitted int     // bytes of hdr already passed on
	// hold is the HoldKafka period this connection is held in, nil when
	// it flows.
	hold *kafkaHold
}

// feed parses b and returns what to forward at once and what to hold
// (every byte from the first frame with the held API key on), with the
// channel that releases it. While a hold is on, a frame header split
// across reads is kept back until its API key is known; otherwise every
// byte is passed on as soon as it is read.
func (r *requests) feed(p *Proxy, b []byte) (fwd, held []byte, release <-chan struct{}) {
	cur := p.kafkaHold()
	if r.hold != nil {
		select {
		case <-r.hold.released:
			r.hold = nil
		default:
			if cur != nil && cur.released == r.hold.released {
				r.hold = cur // HoldKafka changed the key
			}
		}
	}
	out := make([]byte, 0, len(b)+r.n-r.emitted)
	heldAt := -1
	if r.hold != nil {
		heldAt = 0
	}
	for i := 0; i < len(b); {
		if r.left > 0 {
			k := min(r.left, len(b)-i)
			out = append(out, b[i:i+k]...)
			r.left -= k
			i += k
			continue
		}
		r.hdr[r.n] = b[i]
		r.n++
		i++
		if r.n < 4 {
			continue
		}
		size := int(int32(binary.BigEndian.Uint32(r.hdr[:4])))
		if size >= 2 && r.n < 6 {
			continue
		}
		// The header is complete: size < 2 has no API key.
		if size >= 2 {
			key := int16(binary.BigEndian.Uint16(r.hdr[4:6]))
			if r.hold == nil && cur != nil && key == cur.apiKey {
				r.hold = cur
				heldAt = len(out)
			}
			if r.hold != nil && key == r.hold.apiKey {
				p.frames.Add(1)
			}
		}
		out = append(out, r.hdr[r.emitted:r.n]...)
		r.left = max(size, 0) - (r.n - 4)
		r.n, r.emitted = 0, 0
	}
	if r.n > r.emitted && (cur == nil || r.hold != nil) {
		out = append(out, r.hdr[r.emitted:r.n]...)
		r.emitted = r.n
	}
	if heldAt < 0 {
		return out, nil, nil
	}
	return out[:heldAt], out[heldAt:], r.hold.released
}

// rest returns the bytes of a partial frame header kept back, once the
// client's stream has ended.
func (r *requests) rest() []byte {
	b := r.hdr[r.emitted:r.n]
	r.emitted = r.n
	return b
}

// pipe forwards src to dst until src ends, parsing it as Kafka requests
// if fr is not nil. It returns true if src ended with EOF and dst's write
// side was closed in turn (a half-close), false if the pair must be
// closed.
func (p *Proxy) pipe(c *pair, src, dst net.Conn, fr *requests) bool {
	queue := make(chan chunk, 16)
	writerDone := make(chan bool, 1)
	go func() { writerDone <- p.write(c, dst, queue) }()

	// send queues fwd, then held (to wait for release), unless blackholed.
	send := func(fwd, held []byte, release <-chan struct{}) {
		m, delay, _ := p.state()
		if m == modeBlackhole { // blackholed bytes are dropped
			p.dropped.Add(int64(len(fwd) + len(held)))
			return
		}
		due := time.Now().Add(delay)
		for _, ck := range []chunk{{b: fwd, due: due}, {b: held, due: due, release: release}} {
			if len(ck.b) == 0 {
				continue
			}
			select {
			case queue <- ck:
			case <-c.done:
			}
		}
	}
	var readErr error
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			if fr != nil {
				send(fr.feed(p, buf[:n]))
			} else {
				send(buf[:n], nil, nil)
			}
		}
		if err != nil {
			readErr = err
			break
		}
	}
	if fr != nil {
		send(fr.rest(), nil, nil)
	}
	close(queue)
	ok := <-writerDone
	if !ok || !errors.Is(readErr, io.EOF) {
		return false
	}
	// Hold the close back while blackholed.
	for counted := false; ; counted = true {
		m, _, changed := p.state()
		if m != modeBlackhole {
			break
		}
		if !counted {
			p.held.Add(1)
		}
		select {
		case <-changed:
		case <-c.done:
			return false
		}
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		return tc.CloseWrite() == nil
	}
	return false
}

// write writes the queued chunks to dst in order, each no earlier than its
// due time and only if the proxy is not blackholed by then; a held chunk
// and every later one wait for its release. It returns false if dst failed
// or the pair was closed; held chunks are then dropped.
func (p *Proxy) write(c *pair, dst net.Conn, queue <-chan chunk) bool {
	ok := true
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	deliver := func(ck chunk) {
		if wait := time.Until(ck.due); wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			select {
			case <-timer.C:
			case <-c.done:
				ok = false
				return
			}
		}
		if m, _, _ := p.state(); m == modeBlackhole {
			p.dropped.Add(int64(len(ck.b)))
			return
		}
		if _, err := dst.Write(ck.b); err != nil {
			ok = false
			c.close() // unblocks the reader
		}
	}
	var held []chunk // in order; the first waits for its release
	for queue != nil || len(held) > 0 {
		var release <-chan struct{}
		if len(held) > 0 {
			release = held[0].release
		}
		select {
		case ck, open := <-queue:
			switch {
			case !open:
				queue = nil
			case !ok:
				// drain so the reader never blocks
			case len(held) > 0 || ck.heldBack():
				held = append(held, ck)
			default:
				deliver(ck)
			}
		case <-release:
			for len(held) > 0 && !held[0].heldBack() && ok {
				deliver(held[0])
				held[0] = chunk{}
				held = held[1:]
			}
		case <-c.done:
			return false
		}
		if !ok {
			held = nil
		}
	}
	return ok
}
