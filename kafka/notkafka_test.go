package kafka

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// Brokers that point at a server of another protocol (an HTTP port, a
// PostgreSQL port): Ping says the server did not answer as a Kafka broker,
// naming it, instead of the client library's "multiple Read calls return
// no data or error"; the error wraps ErrNotKafka, and is an outage (never
// an event's attempt).
func TestPingAtAServerThatIsNotKafka(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, reply string }{
		{"http", "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"},
		// PostgreSQL's ErrorResponse to a startup packet it cannot read.
		{"postgres", "E\x00\x00\x00\x50SFATAL\x00C0A000\x00Munsupported frontend protocol\x00\x00"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = l.Close() }()
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
							_, _ = conn.Write([]byte(c.reply))
						}
					}()
				}
			}()
			p := newTestPublisher(t, Config{Brokers: []string{l.Addr().String()}, DialTimeout: time.Second})
			err = p.Ping(context.Background())
			if err == nil || !strings.Contains(err.Error(), "did not answer as a Kafka broker") || !strings.Contains(err.Error(), l.Addr().String()) {
				t.Fatalf("Ping = %v, want it to say the server at %s did not answer as a Kafka broker", err, l.Addr())
			}
			if !IsNotKafka(err) || !IsOutage(err) {
				t.Errorf("Ping = %v: IsNotKafka %v, IsOutage %v; want both", err, IsNotKafka(err), IsOutage(err))
			}
			t.Logf("ping: %v", err)
		})
	}
}
