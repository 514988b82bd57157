package produce

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// tlsProbeAfter is how long a TLS handshake may go without a byte from the
// broker before brokerDialer checks, on a second connection, whether the
// listener speaks plaintext Kafka. A TLS listener answers a ClientHello
// within one round trip; a plaintext Kafka listener never answers it: it
// reads the record header 0x16 0x03 0x01 as the start of a ~369 MB request
// size and waits for the rest (kfake), or closes the connection because
// the size exceeds socket.request.max.bytes (Apache Kafka), see
// https://kafka.apache.org/protocol#protocol_common.
const tlsProbeAfter = 250 * time.Millisecond

// brokerDialer opens broker connections for the Publisher's kafka-go
// Transports (Transport.Dial) and Dialer (Dialer.DialFunc). It does the TLS
// handshake itself, instead of kafka-go, so that its failures wrap ErrTLS
// and name the cause, and a plaintext listener is recognized within
// tlsProbeAfter: kafka-go's Transport handshakes implicitly on its first
// request, so a TLS failure reads as that request's error, often a bare
// unexpected EOF (kafka-go #864; transport.go connGroup.connect). With SASL
// it watches the authentication exchange (saslWatchConn).
type brokerDialer struct {
	net      *net.Dialer
	tls      *tls.Config // nil: plaintext
	timeout  time.Duration
	mech     string // Config.SASLMechanism; "" without SASL
	user     string // Config.SASLUsername
	clientID string
	// wrap, if set, wraps every connection dialed (fault tests).
	wrap func(net.Conn) net.Conn
}

// dial returns the connection to use and the underlying TCP connection.
func (d *brokerDialer) dial(ctx context.Context, network, addr string) (conn, raw net.Conn, err error) {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	raw, err = d.net.DialContext(ctx, network, addr)
	if err != nil {
		return nil, nil, err
	}
	conn = raw
	if d.tls != nil {
		if conn, err = d.handshake(ctx, raw, network, addr); err != nil {
			_ = raw.Close()
			return nil, nil, err
		}
	}
	if d.mech != "" {
		conn = &saslWatchConn{Conn: conn, addr: addr, mech: d.mech, user: d.user}
	}
	if d.wrap != nil {
		conn = d.wrap(conn)
	}
	return conn, raw, nil
}

// dialConn is dial for kafka-go's Dialer.DialFunc.
func (d *brokerDialer) dialConn(ctx context.Context, network, addr string) (net.Conn, error) {
	c, _, err := d.dial(ctx, network, addr)
	return c, err
}

// handshake runs the TLS client handshake on raw within ctx (which carries
// Config.DialTimeout). If the broker has sent nothing after tlsProbeAfter,
// a second connection checks whether the listener answers a plaintext
// Kafka ApiVersions request; if so the handshake is abandoned at once.
func (d *brokerDialer) handshake(ctx context.Context, raw net.Conn, network, addr string) (net.Conn, error) {
	cfg := d.tls
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		cfg = cfg.Clone()
		cfg.ServerName = host
	}
	rw := &readWatchConn{Conn: raw}
	tc := tls.Client(rw, cfg)
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var plaintext atomic.Bool
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		t := time.NewTimer(tlsProbeAfter)
		defer t.Stop()
		select {
		case <-hctx.Done():
			return
		case <-t.C:
		}
		if !rw.answered.Load() && speaksPlaintextKafka(hctx, d.net, network, addr) {
			plaintext.Store(true)
			cancel() // makes HandshakeContext close the connection and return
		}
	}()
	err := tc.HandshakeContext(hctx)
	cancel()
	<-probed
	if err == nil {
		return &alertConn{Conn: tc, addr: addr}, nil
	}
	answered := rw.answered.Load()
	switch {
	case plaintext.Load():
		return nil, plaintextListenerError(addr)
	case ctx.Err() != nil && !answered:
		// Neither TLS nor plaintext Kafka answered (or the probe had no
		// time to run): a broker that does not answer at all, an outage.
		return nil, fmt.Errorf("TLS handshake with %s: no answer: %w", addr, ctx.Err())
	case ctx.Err() != nil:
		return nil, fmt.Errorf("%w with %s: handshake not completed within Config.DialTimeout (%s): %w",
			ErrTLS, addr, d.timeout, ctx.Err())
	}
	var rhe tls.RecordHeaderError
	if errors.As(err, &rhe) {
		return nil, fmt.Errorf("%w with %s: the broker answered with bytes that are no TLS record (%q): "+
			"the listener does not speak TLS", ErrTLS, addr, rhe.RecordHeader[:])
	}
	if !answered && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) {
		// Apache Kafka's plaintext listener closes a connection whose
		// first "request" (our ClientHello) is larger than
		// socket.request.max.bytes.
		if speaksPlaintextKafka(ctx, d.net, network, addr) {
			return nil, plaintextListenerError(addr)
		}
		return nil, fmt.Errorf("%w with %s: the broker closed the connection without answering the handshake: "+
			"the listener may not speak TLS: %w", ErrTLS, addr, err)
	}
	var (
		verr   *tls.CertificateVerificationError
		unkCA  x509.UnknownAuthorityError
		host   x509.HostnameError
		invCrt x509.CertificateInvalidError
		alert  tls.AlertError
	)
	switch {
	case errors.As(err, &verr), errors.As(err, &unkCA), errors.As(err, &host), errors.As(err, &invCrt):
		return nil, fmt.Errorf("%w with %s: broker certificate not accepted (see Config.TLSCAFile): %w", ErrTLS, addr, err)
	case errors.As(err, &alert):
		return nil, fmt.Errorf("%w with %s: the broker refused the handshake (a client certificate it does not "+
			"accept? see Config.TLSCertFile): %w", ErrTLS, addr, err)
	}
	return nil, fmt.Errorf("%w with %s: %w", ErrTLS, addr, err)
}

// isRemoteAlert reports whether err is a TLS alert the peer sent: crypto/tls
// reports one read after the handshake as a *net.OpError with Op "remote
// error" around its unexported alert type.
func isRemoteAlert(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "remote error"
}

// alertConn names the TLS alert a broker sends after the handshake: with
// TLS 1.3 the client's handshake is done before the server has checked the
// client certificate, so a broker that refuses it (mutual TLS) answers the
// first read with an alert ("bad certificate") instead of failing the
// handshake (crypto/tls, not kafka-go). Such an error wraps ErrTLS like a
// failed handshake does.
type alertConn struct {
	net.Conn
	addr string
}

func (c *alertConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil && isRemoteAlert(err) {
		err = fmt.Errorf("%w with %s: the broker refused the connection after the handshake (a client certificate "+
			"it does not accept? see Config.TLSCertFile): %w", ErrTLS, c.addr, err)
	}
	return n, err
}

func plaintextListenerError(addr string) error {
	return fmt.Errorf("%w with %s: the broker answers plaintext Kafka requests on this port: the listener does "+
		"not speak TLS (use the broker's SSL or SASL_SSL listener, or turn Config.TLSEnabled off)", ErrTLS, addr)
}

// probeCorrelationID marks the ApiVersions request of speaksPlaintextKafka
// ("pgob").
const probeCorrelationID = 0x70676f62

// speaksPlaintextKafka reports whether addr answers a plaintext Kafka
// ApiVersions v0 request (api key 18) with a response carrying our
// correlation ID, within ctx. ApiVersions is the one request every Kafka
// listener answers before authentication (KIP-35, and KIP-43 for SASL
// listeners). A TLS listener reads the request as a malformed record and
// closes the connection (or sends an alert), so this never mistakes one
// for the other. kafka-go has no such check: it waits for the dial deadline
// or reports the closed connection as an EOF (transport.go
// connGroup.connect; no kafka-go issue).
func speaksPlaintextKafka(ctx context.Context, d *net.Dialer, network, addr string) bool {
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return false
	}
	defer func() { _ = c.Close() }()
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	// Request header v1: int16 api_key, int16 api_version, int32
	// correlation_id, nullable string client_id (-1: null); v0 has no body.
	req := make([]byte, 4+2+2+4+2)
	binary.BigEndian.PutUint32(req[0:], uint32(len(req)-4))
	binary.BigEndian.PutUint16(req[4:], 18)
	binary.BigEndian.PutUint16(req[6:], 0)
	binary.BigEndian.PutUint32(req[8:], probeCorrelationID)
	binary.BigEndian.PutUint16(req[12:], 0xffff)
	if _, err := c.Write(req); err != nil {
		return false
	}
	// Response: int32 size, int32 correlation_id, int16 error_code, ...
	var resp [8]byte
	if _, err := io.ReadFull(c, resp[:]); err != nil {
		return false
	}
	size := binary.BigEndian.Uint32(resp[0:])
	return binary.BigEndian.Uint32(resp[4:]) == probeCorrelationID && size >= 6 && size < 1<<20
}

// readWatchConn records whether anything was read from the connection.
type readWatchConn struct {
	net.Conn
	answered atomic.Bool
}

func (c *readWatchConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && !c.answered.Load() {
		c.answered.Store(true)
	}
	return n, err
}

// saslWatchConn follows the requests written on a connection until the
// first one that is neither ApiVersions (18) nor SaslHandshake (17) nor
// SaslAuthenticate (36), i.e. until authentication is over. If the broker
// closes the connection while a SASL request is unanswered, the read error
// becomes an errAuthentication: brokers may end a failed exchange by
// closing the connection instead of answering (kfake always does), which
// kafka-go's Transport reports as a bare "unexpected EOF": its check for
// this (transport.go authenticateSASL, errors.Is(err, io.EOF)) never
// matches, because protocol.ReadResponse turns io.EOF into
// io.ErrUnexpectedEOF (protocol/protocol.go dontExpectEOF), and a
// SaslHandshake has no such check at all (no kafka-go issue). Requests are
// framed as int32 size, then int16 api_key
// (https://kafka.apache.org/protocol#protocol_messages). Write is called
// by one goroutine at a time (kafka-go serializes each connection's
// requests); Read may run concurrently and only reads atomics.
type saslWatchConn struct {
	net.Conn
	addr, mech, user string

	hdr    [6]byte
	hdrN   int
	skip   int64
	inSASL atomic.Bool
	done   atomic.Bool
}

func (c *saslWatchConn) Write(b []byte) (int, error) {
	if !c.done.Load() {
		c.scan(b)
	}
	return c.Conn.Write(b)
}

func (c *saslWatchConn) scan(b []byte) {
	for len(b) > 0 && !c.done.Load() {
		if c.skip > 0 {
			n := int64(len(b))
			if n > c.skip {
				n = c.skip
			}
			c.skip -= n
			b = b[n:]
			continue
		}
		n := copy(c.hdr[c.hdrN:], b)
		c.hdrN += n
		b = b[n:]
		if c.hdrN < len(c.hdr) {
			return
		}
		c.hdrN = 0
		c.skip = int64(int32(binary.BigEndian.Uint32(c.hdr[0:]))) - 2
		switch binary.BigEndian.Uint16(c.hdr[4:]) {
		case 17, 36: // SaslHandshake, SaslAuthenticate
			c.inSASL.Store(true)
		case 18: // ApiVersions
		default:
			c.inSASL.Store(false)
			c.done.Store(true)
		}
	}
}

func (c *saslWatchConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil && c.inSASL.Load() && !c.done.Load() &&
		(errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) {
		// Not wrapping err: kafka-go turns an io.EOF during SASL into a
		// bare SASLAuthenticationFailed, dropping this text.
		err = fmt.Errorf("%w: broker %s closed the connection during authentication with mechanism %s as user %q "+
			"(%v): wrong password, unknown user, or a mechanism the listener does not enable",
			errAuthentication, c.addr, c.mech, c.user, err)
	}
	return n, err
}

// connSet tracks the Writer's broker connections, so that Close can cut
// them: kafka-go's Writer.Close waits for every queued batch through all
// its attempts and cannot cancel them (writer.go partitionWriter.writeBatch,
// its TODO; kafka-go #1099, #1427).
type connSet struct {
	mu     sync.Mutex
	closed bool
	m      map[net.Conn]struct{}
}

var errDialClosed = errors.New("kafka: publisher closing")

func (s *connSet) dial(ctx context.Context, d *brokerDialer, network, addr string) (net.Conn, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, errDialClosed
	}
	c, raw, err := d.dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = c.Close()
		_ = raw.Close()
		return nil, errDialClosed
	}
	tc := &trackedConn{Conn: c, raw: raw, set: s}
	s.m[tc] = struct{}{}
	return tc, nil
}

func (s *connSet) closeAll() {
	s.mu.Lock()
	s.closed = true
	all := make([]*trackedConn, 0, len(s.m))
	for c := range s.m {
		all = append(all, c.(*trackedConn))
	}
	s.mu.Unlock()
	for _, c := range all {
		// The TCP connection, not the TLS one: tls.Conn.Close may first
		// try to send close_notify to a broker that no longer reads.
		_ = c.raw.Close()
	}
}

type trackedConn struct {
	net.Conn
	raw  net.Conn
	set  *connSet
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.set.mu.Lock()
		delete(c.set.m, c)
		c.set.mu.Unlock()
	})
	err := c.Conn.Close()
	_ = c.raw.Close()
	return err
}
