package produce

import (
	"context"
	"errors"
	"fmt"
	"io"

	kafkago "github.com/segmentio/kafka-go"
)

// Ping checks that a broker is reachable and answers a metadata request. It
// opens a fresh connection (kafka-go's Transport serves metadata from its
// cache: kafka-go #1374) to each of Config.Brokers in turn and returns nil
// at the first success, or an error ("ping: ...") joining every broker's
// failure. Without a ctx deadline it is bounded by Config.DialTimeout +
// Config.WriteTimeout. Use it for readiness checks and for retrying at
// startup; IsRetriable tells whether retrying makes sense, classify what
// went wrong: a refused SASL exchange wraps errAuthentication, a failed TLS
// handshake ErrTLS (a plaintext listener is recognized within about a
// quarter of a second), both naming the broker; a server that answers in
// another protocol (an HTTP or PostgreSQL port) wraps errNotKafka.
func (p *Publisher) Ping(ctx context.Context) error {
	if p.closed.Load() {
		return fmt.Errorf("ping: %w", errClosed)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.cfg.DialTimeout+p.cfg.WriteTimeout)
		defer cancel()
	}
	errs := make([]error, 0, len(p.cfg.Brokers))
	for _, b := range p.cfg.Brokers {
		err := p.pingOne(ctx, b)
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("broker %s: %w", b, p.explain("", err)))
		if ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("ping: %w", errors.Join(errs...))
}

// dialBroker opens a connection of its own to broker, outside the
// Writer's pool: TCP, then TLS and SASL if configured.
func (p *Publisher) dialBroker(ctx context.Context, broker string) (*kafkago.Conn, error) {
	d := &kafkago.Dialer{
		ClientID:      p.cfg.ClientID,
		Timeout:       p.cfg.DialTimeout,
		DialFunc:      p.dialer.dialConn, // TCP, then TLS if configured
		SASLMechanism: p.mech,
	}
	return d.DialContext(ctx, "tcp", broker)
}

// pingOne asks broker for metadata on a connection of its own, within
// ctx's deadline.
func (p *Publisher) pingOne(ctx context.Context, broker string) error {
	conn, err := p.dialBroker(ctx, broker)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	if dl, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(dl); err != nil {
			return err
		}
	}
	// Metadata request without topics: never auto-creates a topic.
	_, err = conn.Brokers()
	if errors.Is(err, io.ErrNoProgress) {
		// kafka-go's reading of an answer that is not Kafka's (an HTTP
		// or PostgreSQL port given as a broker).
		return fmt.Errorf("%w (is it a Kafka listener's address, not another service's port?): %w", errNotKafka, err)
	}
	return err
}
