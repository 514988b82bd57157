package tcpproxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
	os.Exit(0) // not reached
}

// echoServer echoes every connection and reports, on closed, when a
// connection's read side ended (EOF or error).
type echoServer struct {
	ln     net.Listener
	wg     sync.WaitGroup
	closed chan struct{}
	mu     sync.Mutex
	conns  []net.Conn
}

func newEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echoServer{ln: ln, closed: make(chan struct{}, 100)}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.mu.Lock()
			e.conns = append(e.conns, c)
			e.mu.Unlock()
			e.wg.Add(1)
			go func() {
				defer e.wg.Done()
				_, _ = io.Copy(c, c)
				e.closed <- struct{}{}
				_ = c.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		e.mu.Lock()
		for _, c := range e.conns {
			_ = c.Close()
		}
		e.mu.Unlock()
		e.wg.Wait()
	})
	return e
}

// eventually waits until cond holds, failing the test after timeout (a
// guard against a hung test, not a verdict). It is testenv.Eventually,
// which this package cannot import: testenv imports kafkatemp, which
// imports tcpproxy.
func eventually(t testing.TB, timeout time.Duration, cond func() bool, msgf string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for interval := 2 * time.Millisecond; !cond(); interval = min(2*interval, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("eventually (after %s): "+msgf, append([]any{timeout}, args...)...)
		}
		time.Sleep(interval)
	}
}

// refusedAddr returns a 127.0.0.1:PORT address where every connect is
// refused, held by a bound socket that never listens (testenv.RefusedAddr).
func refusedAddr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatalf("socket: %v", err)
	}
	syscall.CloseOnExec(fd)
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("getsockname: %v", err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
}

func newProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// roundTrip writes msg and reads it back within 5 seconds.
func roundTrip(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatalf("write: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read: %v", err)
	}
	if string(got) != msg {
		t.Fatalf("read %q, want %q", got, msg)
	}
}

// expectClosed asserts that c's next read fails (EOF or reset) within 5
// seconds rather than returning data or timing out.
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(make([]byte, 1))
	if err == nil {
		t.Fatalf("read %d bytes from a closed connection", n)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open: %v", err)
	}
}

// expectSilence asserts that nothing arrives on c for d (the connection is
// held open, not closed).
func expectSilence(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	n, err := c.Read(make([]byte, 64))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("want silence, got %d bytes, err %v", n, err)
	}
	_ = c.SetReadDeadline(time.Time{})
}

func TestForward(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	c := dial(t, p.Addr())
	roundTrip(t, c, "hello")
	big := bytes.Repeat([]byte("0123456789"), 100_000) // 1 MB, many chunks
	go func() { _, _ = c.Write(big) }()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, len(big))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("1 MB round trip: err %v, equal %v", err, bytes.Equal(got, big))
	}
	c2 := dial(t, p.Addr())
	roundTrip(t, c2, "second")
	if n := p.Accepted(); n != 2 {
		t.Errorf("Accepted() = %d, want 2", n)
	}
	if n := p.Conns(); n != 2 {
		t.Errorf("Conns() = %d, want 2", n)
	}
}

func TestHalfClose(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	c := dial(t, p.Addr())
	if _, err := c.Write([]byte("bye")); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c) // the echo, then EOF once the server closes
	if err != nil || string(got) != "bye" {
		t.Fatalf("got %q, %v; want \"bye\", nil", got, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.Conns() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("Conns() = %d after both sides closed", p.Conns())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestCut(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	c := dial(t, p.Addr())
	roundTrip(t, c, "a")
	p.Cut()
	expectClosed(t, c)
	// still accepting
	c2 := dial(t, p.Addr())
	roundTrip(t, c2, "b")
	if n := p.Accepted(); n != 2 {
		t.Errorf("Accepted() = %d, want 2", n)
	}
}

func TestRefuseAndRestore(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	c := dial(t, p.Addr())
	roundTrip(t, c, "a")
	p.Refuse()
	expectClosed(t, c)
	for range 3 {
		r, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
		if err != nil {
			continue // refused outright is fine too
		}
		_, _ = r.Write([]byte("x"))
		expectClosed(t, r)
		_ = r.Close()
	}
	if n := p.Accepted(); n < 2 {
		t.Errorf("Accepted() = %d, want the refused connections counted", n)
	}
	p.Restore()
	c2 := dial(t, p.Addr())
	roundTrip(t, c2, "back")
}

func TestBlackhole(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	c := dial(t, p.Addr())
	roundTrip(t, c, "a")

	p.Blackhole()
	if _, err := c.Write([]byte("lost")); err != nil {
		t.Fatalf("write while blackholed: %v", err)
	}
	// Once the proxy has dropped the bytes no answer can come: the
	// silence below is the proof, not a guess about timing.
	eventually(t, time.Minute, func() bool { return p.Dropped() >= 4 }, "the blackholed bytes were not dropped")
	expectSilence(t, c, 300*time.Millisecond)

	// New connections are accepted and blackholed too.
	c2 := dial(t, p.Addr())
	if _, err := c2.Write([]byte("lost too")); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, func() bool { return p.Dropped() >= 4+8 }, "the second connection's bytes were not dropped")
	expectSilence(t, c2, 100*time.Millisecond)

	// A close is held back: the server does not see c3 go away.
	c3 := dial(t, p.Addr())
	drain(e.closed)
	_ = c3.Close()
	eventually(t, time.Minute, func() bool { return p.HeldCloses() >= 1 }, "the close was not held back")
	select {
	case <-e.closed:
		t.Fatal("server saw the close while blackholed")
	case <-time.After(100 * time.Millisecond):
	}

	p.Restore()
	// The held close goes through now.
	select {
	case <-e.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("server did not see the held close after Restore")
	}
	// Dropped bytes stay lost; new ones flow on the same connections.
	roundTrip(t, c, "after")
	roundTrip(t, c2, "after2")
	if n := p.Accepted(); n != 3 {
		t.Errorf("Accepted() = %d, want 3", n)
	}
}

func drain(ch chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

func TestBlackholeThenCut(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	c := dial(t, p.Addr())
	roundTrip(t, c, "a")
	p.Blackhole()
	p.Cut() // Cut ends blackholed connections too
	expectClosed(t, c)
}

func TestDelay(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	c := dial(t, p.Addr())
	roundTrip(t, c, "warm")

	const d = 150 * time.Millisecond
	p.Delay(d)
	start := time.Now()
	roundTrip(t, c, "slow")
	if el := time.Since(start); el < 2*d {
		t.Errorf("round trip took %s with Delay(%s), want at least %s", el, d, 2*d)
	}
	// Several writes in a row: every chunk is delayed.
	start = time.Now()
	for _, s := range []string{"1", "2", "3"} {
		if _, err := c.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, 3)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "123" {
		t.Fatalf("got %q, %v", got, err)
	}
	if el := time.Since(start); el < 2*d {
		t.Errorf("took %s, want at least %s", el, 2*d)
	}

	p.Restore()
	roundTrip(t, c, "fast")
}

func TestCloseEndsEverything(t *testing.T) {
	e := newEcho(t)
	p, err := New(e.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, p.Addr())
	roundTrip(t, c, "a")
	c2 := dial(t, p.Addr())
	p.Blackhole()
	_, _ = c2.Write([]byte("held"))
	p.Close() // must not hang on blackholed or delayed connections
	expectClosed(t, c)
	expectClosed(t, c2)
	if r, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		_ = r.Close()
		t.Fatal("dial after Close succeeded")
	}
}

func TestTargetDown(t *testing.T) {
	p := newProxy(t, refusedAddr(t))
	c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err != nil {
		return // reset before the dial completed: fine
	}
	defer c.Close()
	expectClosed(t, c)
}
