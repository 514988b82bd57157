package produce

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/pgoutbox/outbox/kafka"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

func TestSASL(t *testing.T) {
	for _, mech := range []kafka.SASLMechanism{kafka.SASLPlain, kafka.SASLScramSHA256, kafka.SASLScramSHA512} {
		t.Run(string(mech), func(t *testing.T) {
			b, _ := newFakeBroker(t, 1, kfake.EnableSASL(), kfake.Superuser(string(mech), "relay", "s3cr=t,pw"),
				kfake.SeedTopics(2, "sasl"))
			p := newTestPublisher(t, kafka.Config{Brokers: b.addrs, Topic: "sasl",
				SASLMechanism: mech, SASLUsername: "relay", SASLPassword: "s3cr=t,pw"})
			if err := p.Ping(context.Background()); err != nil {
				t.Fatalf("Ping: %v", err)
			}
			if err := p.Send(context.Background(), testMessages(5, []string{"a", "b"})); err != nil {
				t.Fatalf("Publish: %v", err)
			}
			bad := newTestPublisher(t, kafka.Config{Brokers: b.addrs, Topic: "sasl",
				SASLMechanism: mech, SASLUsername: "relay", SASLPassword: "wrong"})
			if err := bad.Ping(context.Background()); err == nil {
				t.Error("Ping with a wrong password succeeded")
			}
		})
	}
}

func TestIsRetriable(t *testing.T) {
	cases := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{kafkago.NotLeaderForPartition, true},
		{kafkago.LeaderNotAvailable, true},
		{kafkago.RequestTimedOut, true},
		{kafkago.NotEnoughReplicas, true},
		{kafkago.NotEnoughReplicasAfterAppend, true},
		{kafkago.UnknownTopicOrPartition, true},
		{fmt.Errorf("publish: %w", kafkago.NotLeaderForPartition), true},
		{kafkago.MessageSizeTooLarge, false},
		{kafkago.MessageTooLargeError{}, false},
		{kafkago.InvalidRecord, false},
		{kafkago.InvalidMessage, false},
		{kafkago.TopicAuthorizationFailed, true},
		{kafkago.ClusterAuthorizationFailed, true},
		{kafkago.InvalidTimestamp, true},
		{kafkago.InvalidTopic, false},
		{kafkago.RecordListTooLarge, false},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, true},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), true},
		{context.Canceled, false},
		{errors.New("unexpected EOF: %w"), false},
		{errClosed, false},
		{ErrNotAttempted, true},
		{&PublishError{Errs: []error{nil, kafkago.NotLeaderForPartition}}, true},
		{&PublishError{Errs: []error{kafkago.MessageSizeTooLarge, kafkago.NotLeaderForPartition}}, false},
	}
	for _, c := range cases {
		if got := IsRetriable(c.err); got != c.want {
			t.Errorf("IsRetriable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	ok := kafka.Config{Brokers: []string{"localhost:9092"}}
	cases := []struct {
		field string
		mod   func(*kafka.Config)
	}{
		{"Brokers", func(c *kafka.Config) { c.Brokers = nil }},
		{"Brokers", func(c *kafka.Config) { c.Brokers = []string{"localhost"} }},
		{"Topic", func(c *kafka.Config) { c.Topic = " t" }},
		{"BatchTimeout", func(c *kafka.Config) { c.BatchTimeout = -1 }},
		{"BatchSize", func(c *kafka.Config) { c.BatchSize = -1 }},
		{"BatchBytes", func(c *kafka.Config) { c.BatchBytes = -1 }},
		{"WriteTimeout", func(c *kafka.Config) { c.WriteTimeout = -1 }},
		{"DialTimeout", func(c *kafka.Config) { c.DialTimeout = -1 }},
		{"MetadataTTL", func(c *kafka.Config) { c.MetadataTTL = -1 }},
		{"MaxAttempts", func(c *kafka.Config) { c.MaxAttempts = -1 }},
		{"Compression", func(c *kafka.Config) { c.Compression = "brotli" }},
		{"TLSCAFile", func(c *kafka.Config) { c.TLSCAFile = "ca.pem" }},
		{"TLSInsecureSkipVerify", func(c *kafka.Config) { c.TLSInsecureSkipVerify = true }},
		{"TLSKeyFile", func(c *kafka.Config) { c.TLSEnabled, c.TLSCertFile = true, "c.pem" }},
		{"SASLMechanism", func(c *kafka.Config) { c.SASLMechanism = "GSSAPI" }},
		{"SASLMechanism", func(c *kafka.Config) { c.SASLUsername = "u" }},
		{"SASLUsername", func(c *kafka.Config) { c.SASLMechanism = "PLAIN" }},
	}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for _, c := range cases {
		cfg := ok
		c.mod(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), "kafka: Config."+c.field+": ") {
			t.Errorf("%s: Validate() = %v", c.field, err)
		}
		if _, nerr := NewPublisher(cfg, nil); nerr == nil || nerr.Error() != err.Error() {
			t.Errorf("%s: NewPublisher error %v, want %v", c.field, nerr, err)
		}
	}
	if err := (&kafka.Config{}).Validate(); err == nil || err.Error() != "kafka: Config.Brokers: empty" {
		t.Errorf("empty config: %v", err)
	}
	for _, comp := range []kafka.Compression{"", "none", "gzip", "snappy", "lz4", "zstd", "ZSTD"} {
		cfg := ok
		cfg.Compression = comp
		if err := cfg.Validate(); err != nil {
			t.Errorf("Compression %q: %v", comp, err)
		}
	}
	d := ok.WithDefaults()
	if d.ClientID != "pgoutbox" || d.BatchTimeout != kafka.DefaultBatchTimeout || d.BatchBytes != 1048576 ||
		d.WriteTimeout != kafka.DefaultWriteTimeout || d.MaxAttempts != 3 || d.Compression != "none" || d.BatchSize != kafka.DefaultBatchSize {
		t.Errorf("defaults: %+v", d)
	}
	_, err := NewPublisher(kafka.Config{Brokers: []string{"h:1"}, TLSEnabled: true, TLSCAFile: "/nonexistent.pem"}, nil)
	if err == nil || !strings.HasPrefix(err.Error(), "kafka: Config.TLSCAFile: ") {
		t.Errorf("missing CA file: %v", err)
	}
}

func TestCompression(t *testing.T) {
	b, topic := newBroker(t, 1)
	for _, comp := range []kafka.Compression{kafka.CompressionGzip, kafka.CompressionSnappy, kafka.CompressionLz4, kafka.CompressionZstd} {
		p := newTestPublisher(t, kafka.Config{Brokers: b.addrs, Topic: topic, Compression: comp})
		if err := p.Send(context.Background(), testMessages(3, []string{string(comp)})); err != nil {
			t.Fatalf("%s: %v", comp, err)
		}
	}
	for _, r := range consume(t, b.addrs, topic, 12) {
		if !bytes.Contains(r.Value, []byte("日本語")) {
			t.Errorf("value %q", r.Value)
		}
	}
}

func BenchmarkPublishOne(b *testing.B) {
	br, topic := newBroker(b, 3)
	p := newTestPublisher(b, kafka.Config{Brokers: br.addrs, Topic: topic})
	ctx := context.Background()
	msg := testMessages(1, []string{"order-1"})
	if err := p.Send(ctx, msg); err != nil { // warm up connections and metadata
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := p.Send(ctx, msg); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPublish100(b *testing.B) {
	br, topic := newBroker(b, 3)
	p := newTestPublisher(b, kafka.Config{Brokers: br.addrs, Topic: topic})
	ctx := context.Background()
	msgs := testMessages(100, []string{"a", "b", "c", "d", "e", "f", "g"})
	if err := p.Send(ctx, msgs); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := p.Send(ctx, msgs); err != nil {
			b.Fatal(err)
		}
	}
}
