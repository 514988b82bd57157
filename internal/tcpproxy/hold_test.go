package tcpproxy

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// frame returns a Kafka request frame: the size, the API key, then body.
func frame(apiKey int16, body string) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(2+len(body)))
	b = binary.BigEndian.AppendUint16(b, uint16(apiKey))
	return append(b, body...)
}

func cat(bs ...[]byte) []byte { return bytes.Join(bs, nil) }

// The parser finds the frames wherever the reads split them: every way of
// cutting the stream in three reads (one or two of them empty included)
// holds exactly the bytes from the first Produce frame on, and counts the
// Produce frames, not the Produce-like bytes inside another frame's body.
func TestRequestsFeedSplits(t *testing.T) {
	before := cat(
		frame(3, "metadata"),
		frame(18, ""),                      // a request that is only its key
		[]byte{0, 0, 0, 1, 0},              // size 1: no API key
		frame(1, string(frame(0, "fake"))), // a body that looks like a Produce
		frame(0x100, ""),                   // key 256: only its low byte is 0
		frame(0x7fff, string(make([]byte, 300))),
	)
	from := cat(frame(0, "produce 1"), frame(3, "later"), frame(0, "produce 2"))
	stream := cat(before, from)
	for i := 0; i <= len(stream); i++ {
		for j := i; j <= len(stream); j++ {
			p := &Proxy{}
			p.HoldKafka(0)
			var r requests
			var fwd, held []byte
			for _, part := range [][]byte{stream[:i], stream[i:j], stream[j:]} {
				f, h, release := r.feed(p, part)
				if len(h) > 0 && release == nil {
					t.Fatalf("split %d,%d: held bytes without a release", i, j)
				}
				if len(held) > 0 && len(f) > 0 {
					t.Fatalf("split %d,%d: %q forwarded after held bytes", i, j, f)
				}
				fwd, held = append(fwd, f...), append(held, h...)
			}
			fwd = append(fwd, r.rest()...)
			if !bytes.Equal(fwd, before) || !bytes.Equal(held, from) {
				t.Fatalf("split %d,%d: forwarded %q, held %q", i, j, fwd, held)
			}
			if n := p.HeldFrames(); n != 2 {
				t.Fatalf("split %d,%d: HeldFrames() = %d, want 2", i, j, n)
			}
		}
	}
}

// Without a hold every byte is passed on as soon as it is read, even a
// frame header's first bytes, so that other protocols are not stalled.
func TestRequestsFeedWithoutHold(t *testing.T) {
	stream := cat(frame(3, "metadata"), frame(0, "produce"), []byte("Postgres?"))
	p := &Proxy{}
	var r requests
	for i := range stream {
		fwd, held, _ := r.feed(p, stream[i:i+1])
		if !bytes.Equal(fwd, stream[i:i+1]) || held != nil {
			t.Fatalf("byte %d: forwarded %q, held %q", i, fwd, held)
		}
	}
	if p.HeldFrames() != 0 {
		t.Fatalf("HeldFrames() = %d", p.HeldFrames())
	}
}

// recorder is a server that records what each connection sends, in
// accept order, and whether it ended.
type recorder struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []*recorded
}

type recorded struct {
	c   net.Conn
	got []byte
	eof bool
}

func newRecorder(t *testing.T) *recorder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{ln: ln}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			rc := &recorded{c: c}
			r.mu.Lock()
			r.conns = append(r.conns, rc)
			r.mu.Unlock()
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					r.mu.Lock()
					rc.got = append(rc.got, buf[:n]...)
					rc.eof = err != nil
					r.mu.Unlock()
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		r.mu.Lock()
		for _, rc := range r.conns {
			_ = rc.c.Close()
		}
		r.mu.Unlock()
		r.wg.Wait()
	})
	return r
}

// accepted returns how many connections the server accepted.
func (r *recorder) accepted() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.conns)
}

// conn returns what the i-th connection received so far and whether it
// ended.
func (r *recorder) conn(i int) ([]byte, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.conns[i].got), r.conns[i].eof
}

// server returns the server side of the i-th connection.
func (r *recorder) server(i int) net.Conn {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conns[i].c
}

// dialNth dials the proxy and waits until the server has accepted the
// proxied connection as its n-th (0-based), so that connections and
// recorder indexes match.
func dialNth(t *testing.T, p *Proxy, r *recorder, n int) net.Conn {
	t.Helper()
	c := dial(t, p.Addr())
	eventually(t, time.Minute, func() bool { return r.accepted() == n+1 }, "connection %d not proxied", n)
	return c
}

// waitGot waits until the i-th connection has received exactly want (and
// fails at once if it received anything else), and ended if eof.
func waitGot(t *testing.T, r *recorder, i int, want []byte, eof bool) {
	t.Helper()
	eventually(t, time.Minute, func() bool {
		got, ended := r.conn(i)
		if !bytes.HasPrefix(want, got) || len(got) > len(want) || ended && (!eof || len(got) < len(want)) {
			t.Fatalf("connection %d: server got %q (ended %v), want %q (ended %v)", i, got, ended, want, eof)
		}
		return len(got) == len(want) && ended == eof
	}, "connection %d: server did not get %q (ended %v)", i, want, eof)
}

func write(t *testing.T, c net.Conn, parts ...[]byte) {
	t.Helper()
	for _, b := range parts {
		if _, err := c.Write(b); err != nil {
			t.Fatalf("write: %v", err)
		}
	}
}

func TestHoldKafka(t *testing.T) {
	r := newRecorder(t)
	p := newProxy(t, r.ln.Addr().String())
	c0 := dialNth(t, p, r, 0)
	c1 := dialNth(t, p, r, 1)

	// Before the hold, even a Produce flows, and a frame cut in pieces
	// reaches the server piece by piece.
	meta := frame(3, "metadata")
	want0 := []byte{}
	for _, part := range [][]byte{meta[:2], meta[2:5], meta[5:], frame(0, "early produce")} {
		write(t, c0, part)
		want0 = append(want0, part...)
		waitGot(t, r, 0, want0, false)
	}

	p.HoldKafka(0)
	// Several frames in one write: those before the Produce flow, the
	// Produce and everything after it on that connection are held.
	write(t, c0, cat(frame(3, "a"), frame(0, "produce 1"), frame(3, "b")))
	eventually(t, time.Minute, func() bool { return p.HeldFrames() == 1 }, "HeldFrames() = %d, want 1", p.HeldFrames())
	// A Produce cut across writes is counted too, once whole header is in.
	p2 := frame(0, "produce 2")
	write(t, c0, p2[:3], p2[3:5], p2[5:])
	eventually(t, time.Minute, func() bool { return p.HeldFrames() == 2 }, "HeldFrames() = %d, want 2", p.HeldFrames())
	want0 = append(want0, frame(3, "a")...)
	waitGot(t, r, 0, want0, false)
	// The client's close is held too.
	if err := c0.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}

	// The server's answers still reach the held connection's client.
	if _, err := r.server(0).Write([]byte("answer")); err != nil {
		t.Fatal(err)
	}
	_ = c0.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, 6)
	if _, err := io.ReadFull(c0, got); err != nil || string(got) != "answer" {
		t.Fatalf("client read %q, %v", got, err)
	}

	// Another connection flows until it sends a Produce of its own; a
	// new one flows too.
	write(t, c1, frame(1, "fetch"))
	waitGot(t, r, 1, frame(1, "fetch"), false)
	write(t, c1, frame(0, "produce 3"), frame(1, "fetch 2"))
	eventually(t, time.Minute, func() bool { return p.HeldFrames() == 3 }, "HeldFrames() = %d, want 3", p.HeldFrames())
	c2 := dialNth(t, p, r, 2)
	write(t, c2, frame(18, "versions"))
	waitGot(t, r, 2, frame(18, "versions"), false)
	roundTrip := func(i int, c net.Conn) { // the server echoes a byte: the pipes are idle
		t.Helper()
		if _, err := r.server(i).Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
	}
	roundTrip(1, c1)
	// Nothing held has leaked meanwhile.
	waitGot(t, r, 0, want0, false)
	waitGot(t, r, 1, frame(1, "fetch"), false)

	p.ReleaseHeld()
	want0 = append(want0, cat(frame(0, "produce 1"), frame(3, "b"), p2)...)
	waitGot(t, r, 0, want0, true) // the held bytes, then the held close
	want1 := cat(frame(1, "fetch"), frame(0, "produce 3"), frame(1, "fetch 2"))
	waitGot(t, r, 1, want1, false)
	// After the release a Produce flows.
	write(t, c1, frame(0, "produce 4"))
	want1 = append(want1, frame(0, "produce 4")...)
	waitGot(t, r, 1, want1, false)
	if n := p.HeldFrames(); n != 3 {
		t.Errorf("HeldFrames() = %d after the release, want 3", n)
	}

	// A second hold, ended by Restore this time, holds again.
	p.HoldKafka(0)
	write(t, c1, frame(0, "produce 5"))
	eventually(t, time.Minute, func() bool { return p.HeldFrames() == 4 }, "HeldFrames() = %d, want 4", p.HeldFrames())
	roundTrip(1, c1)
	waitGot(t, r, 1, want1, false)
	p.Restore()
	waitGot(t, r, 1, append(want1, frame(0, "produce 5")...), false)
}

// Close ends connections with held bytes without delivering them.
func TestHoldKafkaThenClose(t *testing.T) {
	r := newRecorder(t)
	p, err := New(r.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := dialNth(t, p, r, 0)
	p.HoldKafka(0)
	write(t, c, frame(0, "produce"))
	eventually(t, time.Minute, func() bool { return p.HeldFrames() == 1 }, "the produce was not held")
	p.Close() // must not hang on held bytes
	expectClosed(t, c)
	waitGot(t, r, 0, nil, true)
}
