package realkafka

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/pgoutbox/outbox/internal/faultkit"
	"github.com/pgoutbox/outbox/internal/kafkatemp"
	"github.com/pgoutbox/outbox/internal/testenv"
)

// TestRealKafkaListeners runs the relay against a real Kafka 4.4.0 broker
// of its own with automatic topic creation off and SASL/SCRAM and mutual
// TLS listeners: a missing topic with and without
// --kafka-auto-create-topics, then the right and wrong credentials.
func TestRealKafkaListeners(t *testing.T) {
	t.Parallel()
	users := []kafkatemp.User{{Name: "relay", Password: "relay-secret"}}
	k := testenv.RealKafka(t, kafkatemp.Options{SASL: users, TLS: true,
		Props: map[string]string{"auto.create.topics.enable": "false"}})

	t.Run("MissingTopic", func(t *testing.T) {
		for _, flag := range []bool{false, true} {
			db := testenv.MigratedDB(t)
			topic := testenv.TopicName(t)
			args := []string{}
			want := "create it, or enable Config.AutoCreateTopic"
			if flag {
				args = append(args, "--kafka-auto-create-topics")
				want = "the broker did not create it on request"
			}
			p := faultkit.StartRelay(t, db.ConnString, k.Brokers, topic, args...)
			p.WaitReady(60 * time.Second)
			faultkit.WriteEvents(t, db.Pool, 50, 5)
			testenv.Eventually(t, 20*time.Second, func() bool { return strings.Contains(p.Stderr(), want) },
				"flag %v: the relay did not say %q:\n%s", flag, want, faultkit.Tail(p.Stderr(), 4000))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if _, err := kadm.NewClient(k.Client(t)).CreateTopic(ctx, 2, -1, nil, topic); err != nil {
				t.Fatal(err)
			}
			cancel()
			created := time.Now()
			testenv.Eventually(t, 20*time.Second, func() bool { return faultkit.Unpublished(t, db.Pool) == 0 },
				"flag %v: not published after the topic was created:\n%s", flag, faultkit.Tail(p.Stderr(), 4000))
			t.Logf("flag %v: published %s after the topic was created", flag, time.Since(created).Round(10*time.Millisecond))
			if n := faultkit.Count(t, db.Pool, "SELECT count(*) FROM outbox WHERE dead_lettered_at IS NOT NULL OR attempts > 0"); n != 0 {
				t.Errorf("flag %v: %d events dead-lettered or counting attempts for a missing topic", flag, n)
			}
			faultkit.CheckTopic(t, db.Pool, k.Brokers, topic, "missing topic, then created", 30*time.Second)
			p.Term()
			_ = p.Wait()
		}
	})

	sasl := func(password string) []string {
		return []string{"--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-username", "relay", "--kafka-sasl-password", password}
	}
	files := k.Real.TLS()
	other, err := kafkatemp.NewCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tlsArgs := func(f kafkatemp.TLSFiles) []string {
		return []string{"--kafka-tls", "--kafka-tls-ca", files.CA, "--kafka-tls-cert", f.ClientCert, "--kafka-tls-key", f.ClientKey}
	}
	for _, c := range []struct {
		name    string
		brokers []string
		args    []string
		refused string // "" when the relay must deliver
	}{
		{"SASLRight", k.Real.SASLBrokers(), sasl("relay-secret"), ""},
		{"SASLWrongPassword", k.Real.SASLBrokers(), sasl("wrong"), "SASL authentication failed"},
		{"TLSRight", k.Real.TLSBrokers(), tlsArgs(files), ""},
		{"TLSUnknownClientCertificate", k.Real.TLSBrokers(), tlsArgs(other), "TLS handshake failed"},
		{"TLSUntrustedBroker", k.Real.TLSBrokers(), []string{"--kafka-tls", "--kafka-tls-ca", other.CA}, "TLS handshake failed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			db := testenv.MigratedDB(t)
			topic := k.Topic(t, 2)
			p := faultkit.StartRelay(t, db.ConnString, c.brokers, topic, c.args...)
			if c.refused != "" {
				err := p.WaitTimeout(60 * time.Second)
				if err == nil || !strings.Contains(p.Stderr(), c.refused) {
					t.Fatalf("exit %v; want a failure saying %q:\n%s", err, c.refused, faultkit.Tail(p.Stderr(), 4000))
				}
				return
			}
			p.WaitReady(60 * time.Second)
			faultkit.WriteEvents(t, db.Pool, 100, 10)
			testenv.Eventually(t, 30*time.Second, func() bool { return faultkit.Unpublished(t, db.Pool) == 0 }, "not published:\n%s", faultkit.Tail(p.Stderr(), 4000))
			faultkit.CheckTopic(t, db.Pool, k.Brokers, topic, c.name, 30*time.Second)
		})
	}
}
