package produce

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/kafka"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// longTimeout is the DialTimeout and WriteTimeout of the calls whose
// failure must not wait for a timeout: a call that ended well before it
// was ended by what the broker did, however slow the machine.
const longTimeout = 30 * time.Second

// connectErrors runs Ping, CheckTopics and Publish with cfg and returns
// their errors and the longest time one took.
func connectErrors(t *testing.T, cfg kafka.Config) (errs []error, longest time.Duration) {
	t.Helper()
	p := newTestPublisher(t, cfg)
	for _, call := range []func(context.Context) error{
		p.Ping,
		func(ctx context.Context) error { return p.CheckTopics(ctx) },
		func(ctx context.Context) error { return p.Send(ctx, testMessages(3, []string{"a", "b"})) },
	} {
		start := time.Now()
		err := call(context.Background())
		longest = max(longest, time.Since(start))
		errs = append(errs, err)
	}
	return errs, longest
}

// TestAuthenticationErrors: every way the broker refuses SASL wraps
// errAuthentication, names the mechanism and user but not the password, and
// is classified as its own reason, not as a rejection of records.
func TestAuthenticationErrors(t *testing.T) {
	const user, good, bad = "relay", "right-pw", "hunter2-wrong"
	b, _ := newFakeBroker(t, 1, kfake.EnableSASL(), kfake.Superuser(string(kafka.SASLPlain), user, good),
		kfake.Superuser(string(kafka.SASLScramSHA256), user, good), kfake.SeedTopics(1, "sasl"))
	// A broker that does not enable the mechanism answers the handshake
	// with UNSUPPORTED_SASL_MECHANISM (kfake enables all three).
	refusing, _ := newFakeBroker(t, 1, kfake.EnableSASL(), kfake.Superuser(string(kafka.SASLPlain), user, good), kfake.SeedTopics(1, "sasl"))
	refusing.cluster.ControlKey(int16(kmsg.SASLHandshake), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		refusing.cluster.KeepControl()
		req := kreq.(*kmsg.SASLHandshakeRequest)
		if req.Mechanism == string(kafka.SASLPlain) {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.SASLHandshakeResponse)
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		resp.SupportedMechanisms = []string{string(kafka.SASLPlain)}
		return resp, nil, true
	})

	for _, c := range []struct {
		name       string
		mech       kafka.SASLMechanism
		user, pass string
		addrs      []string
		want       string
	}{
		{"PLAIN wrong password", kafka.SASLPlain, user, bad, b.addrs, "closed the connection during authentication"},
		{"SCRAM-SHA-256 wrong password", kafka.SASLScramSHA256, user, bad, b.addrs, "closed the connection during authentication"},
		{"SCRAM-SHA-256 unknown user", kafka.SASLScramSHA256, "nobody", bad, b.addrs, "closed the connection during authentication"},
		{"SCRAM-SHA-512 without credentials", kafka.SASLScramSHA512, user, good, b.addrs, "closed the connection during authentication"},
		{"SCRAM-SHA-512 refused mechanism", kafka.SASLScramSHA512, user, good, refusing.addrs, "the listener does not enable this mechanism"},
	} {
		t.Run(c.name, func(t *testing.T) {
			errs, longest := connectErrors(t, kafka.Config{Brokers: c.addrs, Topic: "sasl",
				SASLMechanism: c.mech, SASLUsername: c.user, SASLPassword: c.pass,
				DialTimeout: longTimeout, WriteTimeout: longTimeout})
			for i, err := range errs {
				if !IsAuthentication(err) {
					t.Fatalf("call %d: %v, want errAuthentication", i, err)
				}
				msg := err.Error()
				if !strings.Contains(msg, c.want) || !strings.Contains(msg, string(c.mech)) || !strings.Contains(msg, `"`+c.user+`"`) {
					t.Errorf("call %d: %q, want it to say %q and name %s and %q", i, msg, c.want, c.mech, c.user)
				}
				if strings.Contains(msg, c.pass) {
					t.Errorf("call %d: the error shows the password: %q", i, msg)
				}
				if class, reason := classify(err); class != classOutage || reason != reasonAuthentication || IsRecordRejected(err) {
					t.Errorf("call %d: classify = %v, %q", i, class, reason)
				}
			}
			if longest >= longTimeout {
				t.Errorf("a call took %v: it waited for DialTimeout or WriteTimeout (%v), not for the broker's refusal", longest, longTimeout)
			}
			t.Logf("longest call %v; ping: %v\npublish: %v", longest.Round(time.Millisecond), errs[0], errs[2])
		})
	}

	t.Run("good credentials", func(t *testing.T) {
		errs, _ := connectErrors(t, kafka.Config{Brokers: b.addrs, Topic: "sasl",
			SASLMechanism: kafka.SASLScramSHA256, SASLUsername: user, SASLPassword: good})
		for i, err := range errs {
			if err != nil {
				t.Errorf("call %d: %v", i, err)
			}
		}
	})
}

// selfSigned returns a certificate for 127.0.0.1 and the path of a PEM
// file holding it, to trust it as a CA.
func selfSigned(t *testing.T) (tls.Certificate, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kfake test broker"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, path
}

// maxRequestListener makes kfake close a connection whose first request
// is larger than Apache Kafka's default socket.request.max.bytes
// (104857600), as Kafka's plaintext listener does (kfake would instead
// wait for the whole "request").
type maxRequestListener struct{ net.Listener }

func (l maxRequestListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &maxRequestConn{Conn: c}, nil
}

type maxRequestConn struct {
	net.Conn
	checked bool
	head    []byte
}

func (c *maxRequestConn) Read(b []byte) (int, error) {
	if !c.checked {
		c.checked = true
		var size [4]byte
		if _, err := io.ReadFull(c.Conn, size[:]); err != nil {
			return 0, err
		}
		if binary.BigEndian.Uint32(size[:]) > 104857600 {
			_ = c.Conn.Close()
			return 0, io.EOF
		}
		c.head = size[:]
	}
	if len(c.head) > 0 {
		n := copy(b, c.head)
		c.head = c.head[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

// TestTLSErrors: a TLS handshake that cannot succeed fails fast with
// ErrTLS saying why; one that succeeds works end to end.
func TestTLSErrors(t *testing.T) {
	cert, caFile := selfSigned(t)
	secure, _ := newFakeBroker(t, 1, kfake.TLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}),
		kfake.SeedTopics(2, "tls"))
	plain, _ := newFakeBroker(t, 1, kfake.SeedTopics(2, "tls"))
	kafkaLike, _ := newFakeBroker(t, 1, kfake.SeedTopics(2, "tls"), kfake.ListenFn(func(network, addr string) (net.Listener, error) {
		l, err := net.Listen(network, addr)
		return maxRequestListener{l}, err
	}))
	web := httptest.NewServer(http.NotFoundHandler())
	defer web.Close()

	t.Run("good", func(t *testing.T) {
		errs, _ := connectErrors(t, kafka.Config{Brokers: secure.addrs, Topic: "tls", TLSEnabled: true, TLSCAFile: caFile})
		for i, err := range errs {
			if err != nil {
				t.Errorf("call %d: %v", i, err)
			}
		}
	})

	for _, c := range []struct {
		name  string
		addrs []string
		cfg   kafka.Config
		want  string
	}{
		// Detection must not wait for DialTimeout (longTimeout here).
		{"plaintext kfake listener", plain.addrs, kafka.Config{TLSInsecureSkipVerify: true},
			"the broker answers plaintext Kafka requests on this port: the listener does not speak TLS"},
		{"plaintext listener that closes", kafkaLike.addrs, kafka.Config{TLSInsecureSkipVerify: true},
			"the broker answers plaintext Kafka requests on this port: the listener does not speak TLS"},
		{"not TLS at all", []string{strings.TrimPrefix(web.URL, "http://")}, kafka.Config{TLSInsecureSkipVerify: true},
			"answered with bytes that are no TLS record"},
		{"untrusted certificate", secure.addrs, kafka.Config{}, "broker certificate not accepted"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg
			cfg.Brokers, cfg.Topic, cfg.TLSEnabled = c.addrs, "tls", true
			cfg.DialTimeout, cfg.WriteTimeout = longTimeout, longTimeout
			errs, longest := connectErrors(t, cfg)
			for i, err := range errs {
				if !IsTLS(err) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.addrs[0]) {
					t.Errorf("call %d: %v, want ErrTLS naming %s and saying %q", i, err, c.addrs[0], c.want)
				}
				if class, reason := classify(err); class != classOutage || reason != reasonTLS {
					t.Errorf("call %d: classify = %v, %q", i, class, reason)
				}
			}
			if longest >= longTimeout {
				t.Errorf("a call took %v: detection waited for DialTimeout or WriteTimeout (%v)", longest, longTimeout)
			}
			t.Logf("longest call %v; ping: %v", longest.Round(time.Millisecond), errs[0])
		})
	}

	t.Run("silent listener", func(t *testing.T) {
		// Accepts connections and never answers: an outage, not a TLS
		// problem, bounded by DialTimeout.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = l.Close() }()
		// Ping's own deadline (DialTimeout + WriteTimeout) is far later
		// than DialTimeout, so that the two are told apart on a slow machine.
		p := newTestPublisher(t, kafka.Config{Brokers: []string{l.Addr().String()}, TLSEnabled: true, DialTimeout: time.Second, WriteTimeout: longTimeout})
		start := time.Now()
		err = p.Ping(context.Background())
		if err == nil || IsTLS(err) || !IsOutage(err) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Ping = %v, want an unreachable deadline error", err)
		}
		if d := time.Since(start); d >= longTimeout {
			t.Errorf("Ping took %v: ended by its own deadline (DialTimeout 1s + WriteTimeout %v), not by DialTimeout", d, longTimeout)
		}
		t.Logf("ping: %v", err)
	})
}
