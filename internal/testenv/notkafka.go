package testenv

import (
	"net"
	"testing"
	"time"
)

// HTTPBadRequest is what an HTTP server answers to bytes it cannot read
// as a request, for NotKafka.
const HTTPBadRequest = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"

// NotKafka starts a TCP server of another protocol on a free loopback
// port, for tests of a broker address that is not Kafka's: it reads what
// each connection sends first, answers reply (e.g. HTTPBadRequest) and
// closes. It returns its address; it stops when t ends.
func NotKafka(t testing.TB, reply string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = conn.Close() }()
				buf := make([]byte, 512)
				_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
				if _, err := conn.Read(buf); err == nil {
					_, _ = conn.Write([]byte(reply))
				}
			}()
		}
	}()
	return l.Addr().String()
}
