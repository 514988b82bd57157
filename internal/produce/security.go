package produce

import (
	"crypto/tls"
	"crypto/x509"
	"os"

	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/pgoutbox/outbox/internal/config"
	"github.com/pgoutbox/outbox/kafka"
)

// fieldErr is a *outbox.FieldError of a kafka.Config field, as
// kafka.Config.Validate returns.
func fieldErr(field, format string, args ...any) error {
	return config.Invalid("kafka", field, format, args...)
}

// tlsConfig builds the TLS configuration of Config.TLS*; nil without
// TLSEnabled.
func tlsConfig(c *kafka.Config) (*tls.Config, error) {
	if !c.TLSEnabled {
		return nil, nil
	}
	t := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: c.TLSInsecureSkipVerify, //nolint:gosec // opt-in by config
	}
	if c.TLSCAFile != "" {
		pem, err := os.ReadFile(c.TLSCAFile)
		if err != nil {
			return nil, fieldErr("TLSCAFile", "%v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fieldErr("TLSCAFile", "%s: no PEM certificates", c.TLSCAFile)
		}
		t.RootCAs = pool
	}
	if c.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile)
		if err != nil {
			return nil, fieldErr("TLSCertFile", "%v", err)
		}
		t.Certificates = []tls.Certificate{cert}
	}
	return t, nil
}

func saslMechanism(c *kafka.Config) (sasl.Mechanism, error) {
	switch c.SASLMechanism {
	case kafka.SASLPlain:
		return plain.Mechanism{Username: c.SASLUsername, Password: c.SASLPassword}, nil
	case kafka.SASLScramSHA256, kafka.SASLScramSHA512:
		algo := scram.SHA256
		if c.SASLMechanism == kafka.SASLScramSHA512 {
			algo = scram.SHA512
		}
		m, err := scram.Mechanism(algo, c.SASLUsername, c.SASLPassword)
		if err != nil {
			return nil, fieldErr("SASLUsername/SASLPassword", "%v", err)
		}
		return m, nil
	}
	return nil, nil
}
