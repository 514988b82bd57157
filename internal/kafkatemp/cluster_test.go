package kafkatemp

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// start starts a cluster for the test, or skips it when java or mvn is
// missing (fails under CI=true).
func start(t *testing.T, opts Options) *Cluster {
	t.Helper()
	if err := CheckTools(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	opts.FastStart = true
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// roundTrip creates a topic, produces a record and reads it back.
func roundTrip(t *testing.T, opts ...kgo.Opt) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 3, -1, nil, "rt"); err != nil {
		t.Fatalf("create topic: %v", err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "rt", Key: []byte("k"), Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	cl.AddConsumeTopics("rt")
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("record not read back: %v", err)
		}
		var got []*kgo.Record
		fs.EachRecord(func(r *kgo.Record) { got = append(got, r) })
		if len(got) > 0 {
			if string(got[0].Value) != "v" {
				t.Fatalf("read %q, want v", got[0].Value)
			}
			return
		}
	}
}

func TestOneBrokerOfEachVersion(t *testing.T) {
	// An empty SOURCE_DATE_EPOCH (make outside a git checkout) must not
	// reach the JDK, whose Properties.store cannot parse it.
	t.Setenv("SOURCE_DATE_EPOCH", "")
	for _, v := range Versions {
		t.Run(v, func(t *testing.T) {
			c := start(t, Options{Version: v})
			if c.Version() != v {
				t.Fatalf("Version() = %s", c.Version())
			}
			roundTrip(t, kgo.SeedBrokers(c.Brokers()...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		})
	}
}

func TestThreeBrokersKillAndRestart(t *testing.T) {
	c := start(t, Options{Brokers: 3})
	roundTrip(t, kgo.SeedBrokers(c.Brokers()...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	n := c.Node(2)
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	if n.Running() {
		t.Fatal("node 2 runs after Kill")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitBrokers(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if err := n.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := n.Resume(); err != nil {
		t.Fatal(err)
	}
}

func TestSASLAndTLSListeners(t *testing.T) {
	c := start(t, Options{SASL: []User{{Name: "alice", Password: "alice-secret"}}, TLS: true})
	auth := scram.Auth{User: "alice", Pass: "alice-secret"}
	roundTrip(t, kgo.SeedBrokers(c.SASLBrokers()...), kgo.SASL(auth.AsSha512Mechanism()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))

	files := c.TLS()
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(files.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool.AppendCertsFromPEM(ca)
	cert, err := tls.LoadX509KeyPair(files.ClientCert, files.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.TLSBrokers()...), kgo.DialTLSConfig(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.Ping(ctx); err != nil {
		t.Fatalf("TLS ping: %v", err)
	}
}
