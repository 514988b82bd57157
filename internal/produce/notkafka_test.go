package produce

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/kafka"

	"github.com/pgoutbox/outbox/internal/testenv"
)

// Brokers that point at a server of another protocol (an HTTP port, a
// PostgreSQL port): Ping says the server did not answer as a Kafka broker,
// naming it, instead of the client library's "multiple Read calls return
// no data or error"; the error wraps errNotKafka, and is an outage (never
// an event's attempt).
func TestPingAtAServerThatIsNotKafka(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, reply string }{
		{"http", testenv.HTTPBadRequest},
		// PostgreSQL's ErrorResponse to a startup packet it cannot read.
		{"postgres", "E\x00\x00\x00\x50SFATAL\x00C0A000\x00Munsupported frontend protocol\x00\x00"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			addr := testenv.NotKafka(t, c.reply)
			p := newTestPublisher(t, kafka.Config{Brokers: []string{addr}, DialTimeout: time.Second})
			err := p.Ping(context.Background())
			if err == nil || !strings.Contains(err.Error(), "did not answer as a Kafka broker") || !strings.Contains(err.Error(), addr) {
				t.Fatalf("Ping = %v, want it to say the server at %s did not answer as a Kafka broker", err, addr)
			}
			if !IsNotKafka(err) || !IsOutage(err) {
				t.Errorf("Ping = %v: IsNotKafka %v, IsOutage %v; want both", err, IsNotKafka(err), IsOutage(err))
			}
			t.Logf("ping: %v", err)
		})
	}
}
