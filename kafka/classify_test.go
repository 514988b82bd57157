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

	illegal := ValidateTopic("orders/eu")
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

		// The broker answered with a transient error.
		{"not leader", kafkago.NotLeaderForPartition, ClassRetriable, ReasonNotLeader},
		{"leader not available", kafkago.LeaderNotAvailable, ClassRetriable, ReasonNotLeader},
		{"wrapped not leader", fmt.Errorf("publish: %w", kafkago.NotLeaderForPartition), ClassRetriable, ReasonNotLeader},
		{"not enough replicas", kafkago.NotEnoughReplicas, ClassRetriable, ReasonNotEnoughISR},
		{"not enough replicas after append", kafkago.NotEnoughReplicasAfterAppend, ClassRetriable, ReasonNotEnoughISR},
		{"request timed out", kafkago.RequestTimedOut, ClassRetriable, ReasonTimeout},
		{"unknown topic", kafkago.UnknownTopicOrPartition, ClassRetriable, ReasonUnknownTopic},
		{"unknown topic named", fmt.Errorf("topic %q: %w", "t", kafkago.UnknownTopicOrPartition), ClassRetriable, ReasonUnknownTopic},
		{"missing topic", fmt.Errorf("check topics: %w", missing), ClassRetriable, ReasonUnknownTopic},
		{"other temporary kafka error", kafkago.KafkaStorageError, ClassRetriable, ReasonOther},
		{"throttling quota", kafkago.ThrottlingQuotaExceeded, ClassRetriable, ReasonOther},

		// No usable broker.
		{"connection refused", realDialError(t), ClassUnreachable, ReasonUnreachable},
		{"read timeout", realTimeout(t), ClassUnreachable, ReasonUnreachable},
		{"ECONNRESET", &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, ClassUnreachable, ReasonUnreachable},
		{"EPIPE", fmt.Errorf("write: %w", syscall.EPIPE), ClassUnreachable, ReasonUnreachable},
		{"EOF", io.EOF, ClassUnreachable, ReasonUnreachable},
		{"unexpected EOF", fmt.Errorf("publish: %w", io.ErrUnexpectedEOF), ClassUnreachable, ReasonUnreachable},
		{"net.ErrClosed", net.ErrClosed, ClassUnreachable, ReasonUnreachable},
		{"deadline exceeded", fmt.Errorf("publish: %w", ctx.Err()), ClassUnreachable, ReasonUnreachable},
		{"network exception", kafkago.NetworkException, ClassUnreachable, ReasonUnreachable},
		{"broker not available", kafkago.BrokerNotAvailable, ClassUnreachable, ReasonUnreachable},
		{"not attempted", ErrNotAttempted, ClassUnreachable, ReasonUnreachable},
		{"authentication", auth, ClassUnreachable, ReasonAuthentication},
		{"authentication over EOF", fmt.Errorf("%w: broker closed the connection (%v)", ErrAuthentication, io.EOF), ClassUnreachable, ReasonAuthentication},
		{"bare SASL code", kafkago.SASLAuthenticationFailed, ClassUnreachable, ReasonAuthentication},
		{"unsupported mechanism", kafkago.UnsupportedSASLMechanism, ClassUnreachable, ReasonAuthentication},
		{"tls", tlsErr, ClassUnreachable, ReasonTLS},
		{"tls over a timeout", fmt.Errorf("%w with b: %w", ErrTLS, context.DeadlineExceeded), ClassUnreachable, ReasonTLS},

		// Permanent for this record.
		{"message too large", kafkago.MessageSizeTooLarge, ClassRejected, ReasonMessageTooLarge},
		{"ErrMessageTooLarge wrapped", fmt.Errorf("event is big: %w", ErrMessageTooLarge), ClassRejected, ReasonMessageTooLarge},
		{"kafka-go MessageTooLargeError", kafkago.MessageTooLargeError{}, ClassRejected, ReasonMessageTooLarge},
		{"record list too large", kafkago.RecordListTooLarge, ClassRejected, ReasonMessageTooLarge},
		{"invalid record", kafkago.InvalidRecord, ClassRejected, ReasonInvalidRecord},
		{"corrupt message", kafkago.InvalidMessage, ClassRejected, ReasonInvalidRecord},
		{"invalid topic from the broker", kafkago.InvalidTopic, ClassRejected, ReasonInvalidTopic},
		{"illegal topic name", illegal, ClassRejected, ReasonInvalidTopic},
		{"topic authorization", kafkago.TopicAuthorizationFailed, ClassRejected, ReasonAuthorization},
		{"cluster authorization", kafkago.ClusterAuthorizationFailed, ClassRejected, ReasonAuthorization},

		// Neither.
		{"canceled", fmt.Errorf("publish: %w", canceled.Err()), ClassOther, ReasonOther},
		{"closed", fmt.Errorf("publish: %w", ErrClosed), ClassOther, ReasonOther},
		{"closed pipe", io.ErrClosedPipe, ClassOther, ReasonOther},
		{"no topic", fmt.Errorf("publish: message 0: %w", ErrNoTopic), ClassOther, ReasonOther},
		{"non-temporary kafka error", kafkago.UnsupportedVersion, ClassOther, ReasonOther},
		{"unknown", errors.New("something else"), ClassOther, ReasonOther},

		// PublishError: the most severe failed entry.
		{"publish error retriable", &PublishError{Errs: []error{nil, kafkago.NotLeaderForPartition, ErrNotAttempted}}, ClassRetriable, ReasonNotLeader},
		{"publish error unreachable", &PublishError{Errs: []error{ErrNotAttempted, io.EOF, nil}}, ClassUnreachable, ReasonUnreachable},
		{"publish error rejected", &PublishError{Errs: []error{kafkago.NotLeaderForPartition, kafkago.MessageSizeTooLarge}}, ClassRejected, ReasonMessageTooLarge},
		{"publish error other", &PublishError{Errs: []error{ErrNotAttempted, context.Canceled}}, ClassOther, ReasonOther},
		{"publish error empty", &PublishError{Errs: []error{nil}}, ClassOther, ReasonOther},
		{"wrapped publish error", fmt.Errorf("relay: %w", &PublishError{Errs: []error{illegal}}), ClassRejected, ReasonInvalidTopic},
		// errors.Join (Ping, CheckTopics): the first matching rule wins.
		{"joined tls and refused", errors.Join(realDialError(t), tlsErr), ClassUnreachable, ReasonTLS},
	}
	reasons := map[string]bool{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			class, reason := Classify(c.err)
			if class != c.class || reason != c.reason {
				t.Fatalf("Classify(%v) = %v, %q; want %v, %q", c.err, class, reason, c.class, c.reason)
			}
			// The predicates are views of Classify.
			if got, want := IsRetriable(c.err), class == ClassRetriable || class == ClassUnreachable; got != want {
				t.Errorf("IsRetriable = %v, want %v", got, want)
			}
			if got, want := IsRecordRejected(c.err), class == ClassRejected; got != want {
				t.Errorf("IsRecordRejected = %v, want %v", got, want)
			}
			if got, want := IsUnreachable(c.err), class == ClassUnreachable; got != want {
				t.Errorf("IsUnreachable = %v, want %v", got, want)
			}
			if c.err != nil && ErrorReason(c.err) != reason {
				t.Errorf("ErrorReason = %q, want %q", ErrorReason(c.err), reason)
			}
		})
		reasons[c.reason] = true
	}
	for _, r := range []string{ReasonUnreachable, ReasonMessageTooLarge, ReasonInvalidRecord, ReasonNotLeader,
		ReasonNotEnoughISR, ReasonTimeout, ReasonUnknownTopic, ReasonInvalidTopic, ReasonAuthorization,
		ReasonAuthentication, ReasonTLS, ReasonOther} {
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
	long := make([]byte, MaxTopicLength+1)
	for i := range long {
		long[i] = 'a'
	}
	for _, ok := range []string{"a", "payments", "outbox.event.Order_v2-eu", string(long[:MaxTopicLength])} {
		if err := ValidateTopic(ok); err != nil {
			t.Errorf("ValidateTopic(%q) = %v", ok, err)
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
		err := ValidateTopic(c.name)
		if !errors.Is(err, ErrInvalidTopic) || !errors.Is(err, kafkago.InvalidTopic) {
			t.Errorf("ValidateTopic(%q) = %v, want ErrInvalidTopic", c.name, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "is an illegal Kafka topic name: "+c.why) {
			t.Errorf("ValidateTopic(%q) = %q, want it to say %q", c.name, msg, c.why)
		}
	}
}
