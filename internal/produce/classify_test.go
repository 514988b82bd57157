package produce

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/kafka"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/produce"
)

// realDialError returns the error of dialing a port nobody listens on.
func realDialError(t *testing.T) error {
	t.Helper()
	addr := freePort(t)
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		_ = c.Close()
		t.Fatalf("dial %s succeeded", addr)
	}
	return err
}

// realTimeout returns the error of a read that hit its deadline.
func realTimeout(t *testing.T) error {
	t.Helper()
	a, b := net.Pipe()
	defer func() { _ = a.Close(); _ = b.Close() }()
	if err := a.SetReadDeadline(time.Now()); err != nil {
		t.Fatal(err)
	}
	_, err := a.Read(make([]byte, 1))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read: %v", err)
	}
	return err
}

func TestClassify(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	canceled, cancel2 := context.WithCancel(context.Background())
	cancel2()

	illegal := validateTopic("orders/eu")
	missing := &missingTopicError{Topics: []string{"t"}, Broker: "b:9092"}
	auth := annotateAuth(kafkago.SASLAuthenticationFailed, string(kafka.SASLPlain), "u")
	tlsErr := fmt.Errorf("failed to dial: %w", plaintextListenerError("b:9093"))

	cases := []struct {
		name   string
		err    error
		class  class
		reason string
	}{
		{"nil", nil, classNone, ""},

		// A condition of the cluster, whatever the record: an outage.
		{"not leader", kafkago.NotLeaderForPartition, classOutage, reasonNotLeader},
		{"leader not available", kafkago.LeaderNotAvailable, classOutage, reasonNotLeader},
		{"fenced leader epoch", kafkago.FencedLeaderEpoch, classOutage, reasonNotLeader},
		{"wrapped not leader", fmt.Errorf("publish: %w", kafkago.NotLeaderForPartition), classOutage, reasonNotLeader},
		{"no leader in kafka-go's metadata", produce.NewError(protocol.NewErrNoLeader("t", 3)), classOutage, reasonNotLeader},
		{"not enough replicas", kafkago.NotEnoughReplicas, classOutage, reasonNotEnoughISR},
		{"not enough replicas after append", kafkago.NotEnoughReplicasAfterAppend, classOutage, reasonNotEnoughISR},
		{"request timed out", kafkago.RequestTimedOut, classOutage, reasonTimeout},
		{"unknown topic", kafkago.UnknownTopicOrPartition, classOutage, reasonUnknownTopic},
		{"unknown topic named", fmt.Errorf("topic %q: %w", "t", kafkago.UnknownTopicOrPartition), classOutage, reasonUnknownTopic},
		{"missing topic", fmt.Errorf("check topics: %w", missing), classOutage, reasonUnknownTopic},
		{"no topic in kafka-go's metadata", produce.NewError(protocol.NewErrNoTopic("t")), classOutage, reasonUnknownTopic},
		{"no partition in kafka-go's metadata", produce.NewError(protocol.NewErrNoPartition("t", 7)), classOutage, reasonUnknownTopic},
		{"invalid timestamp", kafkago.InvalidTimestamp, classOutage, reasonInvalidTimestamp},
		{"throttling quota", kafkago.ThrottlingQuotaExceeded, classOutage, reasonThrottled},
		{"storage error", kafkago.KafkaStorageError, classOutage, reasonOther},
		{"topic authorization", kafkago.TopicAuthorizationFailed, classOutage, reasonAuthorization},
		{"cluster authorization", kafkago.ClusterAuthorizationFailed, classOutage, reasonAuthorization},

		{"connection refused", realDialError(t), classOutage, reasonUnreachable},
		{"read timeout", realTimeout(t), classOutage, reasonUnreachable},
		{"ECONNRESET", &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, classOutage, reasonUnreachable},
		{"EPIPE", fmt.Errorf("write: %w", syscall.EPIPE), classOutage, reasonUnreachable},
		{"EOF", io.EOF, classOutage, reasonUnreachable},
		{"unexpected EOF", fmt.Errorf("publish: %w", io.ErrUnexpectedEOF), classOutage, reasonUnreachable},
		{"net.ErrClosed", net.ErrClosed, classOutage, reasonUnreachable},
		{"deadline exceeded", fmt.Errorf("publish: %w", ctx.Err()), classOutage, reasonUnreachable},
		{"network exception", kafkago.NetworkException, classOutage, reasonUnreachable},
		{"broker not available", kafkago.BrokerNotAvailable, classOutage, reasonUnreachable},
		{"not attempted", ErrNotAttempted, classOutage, reasonUnreachable},
		{"authentication", auth, classOutage, reasonAuthentication},
		{"authentication over EOF", fmt.Errorf("%w: broker closed the connection (%v)", errAuthentication, io.EOF), classOutage, reasonAuthentication},
		{"bare SASL code", kafkago.SASLAuthenticationFailed, classOutage, reasonAuthentication},
		{"unsupported mechanism", kafkago.UnsupportedSASLMechanism, classOutage, reasonAuthentication},
		{"tls", tlsErr, classOutage, reasonTLS},
		{"tls over a timeout", fmt.Errorf("%w with b: %w", ErrTLS, context.DeadlineExceeded), classOutage, reasonTLS},

		// Permanent for this record.
		{"message too large", kafkago.MessageSizeTooLarge, classRejected, reasonMessageTooLarge},
		{"ErrMessageTooLarge wrapped", fmt.Errorf("event is big: %w", ErrMessageTooLarge), classRejected, reasonMessageTooLarge},
		{"kafka-go MessageTooLargeError", kafkago.MessageTooLargeError{}, classRejected, reasonMessageTooLarge},
		{"record list too large", kafkago.RecordListTooLarge, classRejected, reasonMessageTooLarge},
		{"invalid record", kafkago.InvalidRecord, classRejected, reasonInvalidRecord},
		{"corrupt message", kafkago.InvalidMessage, classRejected, reasonInvalidRecord},
		{"invalid topic from the broker", kafkago.InvalidTopic, classRejected, reasonInvalidTopic},
		{"illegal topic name", illegal, classRejected, reasonInvalidTopic},

		// Neither.
		{"canceled", fmt.Errorf("publish: %w", canceled.Err()), classOther, reasonOther},
		{"closed", fmt.Errorf("publish: %w", errClosed), classOther, reasonOther},
		{"closed pipe", io.ErrClosedPipe, classOther, reasonOther},
		{"no topic", fmt.Errorf("publish: message 0: %w", errNoTopic), classOther, reasonOther},
		{"non-temporary kafka error", kafkago.UnsupportedVersion, classOther, reasonOther},
		{"unknown", errors.New("something else"), classOther, reasonOther},

		// PublishError: the most severe failed entry.
		{"publish error outage", &PublishError{Errs: []error{nil, kafkago.NotLeaderForPartition, ErrNotAttempted}}, classOutage, reasonNotLeader},
		{"publish error unreachable", &PublishError{Errs: []error{ErrNotAttempted, io.EOF, nil}}, classOutage, reasonUnreachable},
		{"publish error rejected", &PublishError{Errs: []error{kafkago.NotLeaderForPartition, kafkago.MessageSizeTooLarge}}, classRejected, reasonMessageTooLarge},
		{"publish error other", &PublishError{Errs: []error{ErrNotAttempted, context.Canceled}}, classOther, reasonOther},
		{"publish error empty", &PublishError{Errs: []error{nil}}, classOther, reasonOther},
		{"wrapped publish error", fmt.Errorf("relay: %w", &PublishError{Errs: []error{illegal}}), classRejected, reasonInvalidTopic},
		// errors.Join (Ping, CheckTopics): the first matching rule wins.
		{"joined tls and refused", errors.Join(realDialError(t), tlsErr), classOutage, reasonTLS},
	}
	reasons := map[string]bool{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			class, reason := classify(c.err)
			if class != c.class || reason != c.reason {
				t.Fatalf("classify(%v) = %v, %q; want %v, %q", c.err, class, reason, c.class, c.reason)
			}
			// The predicates are views of classify.
			if got, want := IsRetriable(c.err), class == classOutage; got != want {
				t.Errorf("IsRetriable = %v, want %v", got, want)
			}
			if got, want := IsRecordRejected(c.err), class == classRejected; got != want {
				t.Errorf("IsRecordRejected = %v, want %v", got, want)
			}
			if got, want := IsOutage(c.err), class == classOutage; got != want {
				t.Errorf("IsOutage = %v, want %v", got, want)
			}
			if c.err != nil && ErrorReason(c.err) != reason {
				t.Errorf("ErrorReason = %q, want %q", ErrorReason(c.err), reason)
			}
		})
		reasons[c.reason] = true
	}
	for _, r := range []string{reasonUnreachable, reasonMessageTooLarge, reasonInvalidRecord, reasonNotLeader,
		reasonNotEnoughISR, reasonTimeout, reasonUnknownTopic, reasonInvalidTopic, reasonAuthorization,
		reasonAuthentication, reasonTLS, reasonInvalidTimestamp, reasonThrottled, reasonOther} {
		if !reasons[r] {
			t.Errorf("no case for reason %q", r)
		}
	}
	if ErrorReason(nil) != reasonOther {
		t.Errorf("ErrorReason(nil) = %q, want %q as before", ErrorReason(nil), reasonOther)
	}
	if s := classRejected.String(); s != "rejected" {
		t.Errorf("classRejected.String() = %q", s)
	}
}

func TestValidateTopic(t *testing.T) {
	long := make([]byte, 249+1)
	for i := range long {
		long[i] = 'a'
	}
	for _, ok := range []string{"a", "payments", "outbox.event.Order_v2-eu", string(long[:249])} {
		if err := validateTopic(ok); err != nil {
			t.Errorf("validateTopic(%q) = %v", ok, err)
		}
	}
	for _, c := range []struct{ name, why string }{
		{"", "it is empty"},
		{".", `"." and ".." are reserved`},
		{"..", `"." and ".." are reserved`},
		{string(long), "it is 250 characters long, over Kafka's limit of 249"},
		{"orders eu", `' ' at byte 6 is not an ASCII letter, digit, '.', '_' or '-'`},
		{"orders/eu", `'/' at byte 6`},
		{"bestellungen-ü", `'ü' at byte 13`},
	} {
		err := validateTopic(c.name)
		if !errors.Is(err, errInvalidTopic) || !errors.Is(err, kafkago.InvalidTopic) {
			t.Errorf("validateTopic(%q) = %v, want errInvalidTopic", c.name, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "is an illegal Kafka topic name: "+c.why) {
			t.Errorf("validateTopic(%q) = %q, want it to say %q", c.name, msg, c.why)
		}
	}
}
