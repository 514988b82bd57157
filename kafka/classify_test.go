package kafka

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

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/produce"

	"github.com/pgoutbox/outbox"
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
	missing := &MissingTopicError{Topics: []string{"t"}, Broker: "b:9092"}
	auth := annotateAuth(kafkago.SASLAuthenticationFailed, string(SASLPlain), "u")
	tlsErr := fmt.Errorf("failed to dial: %w", plaintextListenerError("b:9093"))

	cases := []struct {
		name   string
		err    error
		class  Class
		reason string
	}{
		{"nil", nil, ClassNone, ""},

		// A condition of the cluster, whatever the record: an outage.
		{"not leader", kafkago.NotLeaderForPartition, ClassOutage, ReasonNotLeader},
		{"leader not available", kafkago.LeaderNotAvailable, ClassOutage, ReasonNotLeader},
		{"fenced leader epoch", kafkago.FencedLeaderEpoch, ClassOutage, ReasonNotLeader},
		{"wrapped not leader", fmt.Errorf("publish: %w", kafkago.NotLeaderForPartition), ClassOutage, ReasonNotLeader},
		{"no leader in kafka-go's metadata", produce.NewError(protocol.NewErrNoLeader("t", 3)), ClassOutage, ReasonNotLeader},
		{"not enough replicas", kafkago.NotEnoughReplicas, ClassOutage, ReasonNotEnoughISR},
		{"not enough replicas after append", kafkago.NotEnoughReplicasAfterAppend, ClassOutage, ReasonNotEnoughISR},
		{"request timed out", kafkago.RequestTimedOut, ClassOutage, ReasonTimeout},
		{"unknown topic", kafkago.UnknownTopicOrPartition, ClassOutage, ReasonUnknownTopic},
		{"unknown topic named", fmt.Errorf("topic %q: %w", "t", kafkago.UnknownTopicOrPartition), ClassOutage, ReasonUnknownTopic},
		{"missing topic", fmt.Errorf("check topics: %w", missing), ClassOutage, ReasonUnknownTopic},
		{"no topic in kafka-go's metadata", produce.NewError(protocol.NewErrNoTopic("t")), ClassOutage, ReasonUnknownTopic},
		{"no partition in kafka-go's metadata", produce.NewError(protocol.NewErrNoPartition("t", 7)), ClassOutage, ReasonUnknownTopic},
		{"invalid timestamp", kafkago.InvalidTimestamp, ClassOutage, ReasonInvalidTimestamp},
		{"throttling quota", kafkago.ThrottlingQuotaExceeded, ClassOutage, ReasonThrottled},
		{"storage error", kafkago.KafkaStorageError, ClassOutage, ReasonOther},
		{"topic authorization", kafkago.TopicAuthorizationFailed, ClassOutage, ReasonAuthorization},
		{"cluster authorization", kafkago.ClusterAuthorizationFailed, ClassOutage, ReasonAuthorization},

		{"connection refused", realDialError(t), ClassOutage, ReasonUnreachable},
		{"read timeout", realTimeout(t), ClassOutage, ReasonUnreachable},
		{"ECONNRESET", &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, ClassOutage, ReasonUnreachable},
		{"EPIPE", fmt.Errorf("write: %w", syscall.EPIPE), ClassOutage, ReasonUnreachable},
		{"EOF", io.EOF, ClassOutage, ReasonUnreachable},
		{"unexpected EOF", fmt.Errorf("publish: %w", io.ErrUnexpectedEOF), ClassOutage, ReasonUnreachable},
		{"net.ErrClosed", net.ErrClosed, ClassOutage, ReasonUnreachable},
		{"deadline exceeded", fmt.Errorf("publish: %w", ctx.Err()), ClassOutage, ReasonUnreachable},
		{"network exception", kafkago.NetworkException, ClassOutage, ReasonUnreachable},
		{"broker not available", kafkago.BrokerNotAvailable, ClassOutage, ReasonUnreachable},
		{"not attempted", ErrNotAttempted, ClassOutage, ReasonUnreachable},
		{"authentication", auth, ClassOutage, ReasonAuthentication},
		{"authentication over EOF", fmt.Errorf("%w: broker closed the connection (%v)", ErrAuthentication, io.EOF), ClassOutage, ReasonAuthentication},
		{"bare SASL code", kafkago.SASLAuthenticationFailed, ClassOutage, ReasonAuthentication},
		{"unsupported mechanism", kafkago.UnsupportedSASLMechanism, ClassOutage, ReasonAuthentication},
		{"tls", tlsErr, ClassOutage, ReasonTLS},
		{"tls over a timeout", fmt.Errorf("%w with b: %w", ErrTLS, context.DeadlineExceeded), ClassOutage, ReasonTLS},

		// Permanent for this record.
		{"message too large", kafkago.MessageSizeTooLarge, ClassRejected, ReasonMessageTooLarge},
		{"ErrMessageTooLarge wrapped", fmt.Errorf("event is big: %w", ErrMessageTooLarge), ClassRejected, ReasonMessageTooLarge},
		{"kafka-go MessageTooLargeError", kafkago.MessageTooLargeError{}, ClassRejected, ReasonMessageTooLarge},
		{"record list too large", kafkago.RecordListTooLarge, ClassRejected, ReasonMessageTooLarge},
		{"invalid record", kafkago.InvalidRecord, ClassRejected, ReasonInvalidRecord},
		{"corrupt message", kafkago.InvalidMessage, ClassRejected, ReasonInvalidRecord},
		{"invalid topic from the broker", kafkago.InvalidTopic, ClassRejected, ReasonInvalidTopic},
		{"illegal topic name", illegal, ClassRejected, ReasonInvalidTopic},

		// Neither.
		{"canceled", fmt.Errorf("publish: %w", canceled.Err()), ClassOther, ReasonOther},
		{"closed", fmt.Errorf("publish: %w", ErrClosed), ClassOther, ReasonOther},
		{"closed pipe", io.ErrClosedPipe, ClassOther, ReasonOther},
		{"no topic", fmt.Errorf("publish: message 0: %w", ErrNoTopic), ClassOther, ReasonOther},
		{"non-temporary kafka error", kafkago.UnsupportedVersion, ClassOther, ReasonOther},
		{"unknown", errors.New("something else"), ClassOther, ReasonOther},

		// PublishError: the most severe failed entry.
		{"publish error outage", &PublishError{Errs: []error{nil, kafkago.NotLeaderForPartition, ErrNotAttempted}}, ClassOutage, ReasonNotLeader},
		{"publish error unreachable", &PublishError{Errs: []error{ErrNotAttempted, io.EOF, nil}}, ClassOutage, ReasonUnreachable},
		{"publish error rejected", &PublishError{Errs: []error{kafkago.NotLeaderForPartition, kafkago.MessageSizeTooLarge}}, ClassRejected, ReasonMessageTooLarge},
		{"publish error other", &PublishError{Errs: []error{ErrNotAttempted, context.Canceled}}, ClassOther, ReasonOther},
		{"publish error empty", &PublishError{Errs: []error{nil}}, ClassOther, ReasonOther},
		{"wrapped publish error", fmt.Errorf("relay: %w", &PublishError{Errs: []error{illegal}}), ClassRejected, ReasonInvalidTopic},
		// errors.Join (Ping, CheckTopics): the first matching rule wins.
		{"joined tls and refused", errors.Join(realDialError(t), tlsErr), ClassOutage, ReasonTLS},
	}
	reasons := map[string]bool{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			class, reason := Classify(c.err)
			if class != c.class || reason != c.reason {
				t.Fatalf("Classify(%v) = %v, %q; want %v, %q", c.err, class, reason, c.class, c.reason)
			}
			// The predicates are views of Classify.
			if got, want := IsRetriable(c.err), class == ClassOutage; got != want {
				t.Errorf("IsRetriable = %v, want %v", got, want)
			}
			if got, want := IsRecordRejected(c.err), class == ClassRejected; got != want {
				t.Errorf("IsRecordRejected = %v, want %v", got, want)
			}
			if got, want := IsOutage(c.err), class == ClassOutage; got != want {
				t.Errorf("IsOutage = %v, want %v", got, want)
			}
			if c.err != nil && ErrorReason(c.err) != reason {
				t.Errorf("ErrorReason = %q, want %q", ErrorReason(c.err), reason)
			}
		})
		reasons[c.reason] = true
	}
	for _, r := range []string{ReasonUnreachable, ReasonMessageTooLarge, ReasonInvalidRecord, ReasonNotLeader,
		ReasonNotEnoughISR, ReasonTimeout, ReasonUnknownTopic, ReasonInvalidTopic, ReasonAuthorization,
		ReasonAuthentication, ReasonTLS, ReasonInvalidTimestamp, ReasonThrottled, ReasonOther} {
		if !reasons[r] {
			t.Errorf("no case for reason %q", r)
		}
	}
	if ErrorReason(nil) != ReasonOther {
		t.Errorf("ErrorReason(nil) = %q, want %q as before", ErrorReason(nil), ReasonOther)
	}
	if s := ClassRejected.String(); s != "rejected" {
		t.Errorf("ClassRejected.String() = %q", s)
	}
}

func TestValidateTopic(t *testing.T) {
	long := make([]byte, outbox.MaxTopicLength+1)
	for i := range long {
		long[i] = 'a'
	}
	for _, ok := range []string{"a", "payments", "outbox.event.Order_v2-eu", string(long[:outbox.MaxTopicLength])} {
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
		if !errors.Is(err, ErrInvalidTopic) || !errors.Is(err, kafkago.InvalidTopic) {
			t.Errorf("validateTopic(%q) = %v, want ErrInvalidTopic", c.name, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "is an illegal Kafka topic name: "+c.why) {
			t.Errorf("validateTopic(%q) = %q, want it to say %q", c.name, msg, c.why)
		}
	}
}
