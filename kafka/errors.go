package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	kafkago "github.com/segmentio/kafka-go"
)

// ErrClosed is returned (wrapped) by Publish and Ping after Close.
var ErrClosed = errors.New("kafka: publisher closed")

// ErrNotAttempted is the per-message error for messages of a Publish call
// that were not sent because an earlier part of the same call failed (see
// Publish). It is retriable.
var ErrNotAttempted = errors.New("kafka: not attempted after earlier failure")

// ErrNoTopic is returned (wrapped, as a whole-call error) when a message has
// an empty Topic and Config.Topic is empty too. It is not retriable: it is a
// configuration error.
var ErrNoTopic = errors.New("kafka: Config.Topic: empty and message has no topic")

// PublishError reports per-message results of a Publish call in which some
// messages were not delivered. len(Errs) == len(msgs); Errs[i] is nil if
// msgs[i] was acknowledged by all in-sync replicas, else the reason it was
// not. Use IsRetriable on each non-nil entry to decide whether to retry it.
type PublishError struct {
	Errs []error
}

// Failed returns the number of undelivered messages (non-nil Errs entries).
func (e *PublishError) Failed() int {
	n := 0
	for _, err := range e.Errs {
		if err != nil {
			n++
		}
	}
	return n
}

// Error summarizes as "publish: 3 of 100 messages failed: <first error>".
func (e *PublishError) Error() string {
	var first error
	for _, err := range e.Errs {
		if err != nil {
			first = err
			break
		}
	}
	return fmt.Sprintf("publish: %d of %d messages failed: %s", e.Failed(), len(e.Errs), shortError(first))
}

// shortError is err's text with kafka-go's long error descriptions cut to
// "[code] Title", e.g. "[6] Not Leader For Partition".
func shortError(err error) string {
	if err == nil {
		return "<nil>"
	}
	s := err.Error()
	var ke kafkago.Error
	if errors.As(err, &ke) {
		s = strings.Replace(s, ke.Error(), fmt.Sprintf("[%d] %s", int16(ke), ke.Title()), 1)
	}
	return s
}

// Unwrap returns the non-nil per-message errors, so that errors.Is and
// errors.As see them (e.g. errors.Is(err, kafkago.MessageSizeTooLarge)).
func (e *PublishError) Unwrap() []error {
	out := make([]error, 0, e.Failed())
	for _, err := range e.Errs {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// IsRetriable reports whether err is transient, i.e. sending the same message
// again later may succeed. For a *PublishError it reports whether every
// failed message is retriable; callers should normally check Errs[i] one by
// one instead. nil is not retriable.
//
// Retriable: network errors (net.Error, connection refused/reset, broken pipe,
// io.EOF, io.ErrUnexpectedEOF), context.DeadlineExceeded, ErrNotAttempted,
// and Kafka errors that kafka-go's Error.Temporary reports as temporary, which
// include NOT_LEADER_OR_FOLLOWER (NOT_LEADER_FOR_PARTITION),
// LEADER_NOT_AVAILABLE, REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS,
// NOT_ENOUGH_REPLICAS_AFTER_APPEND, NETWORK_EXCEPTION and
// UNKNOWN_TOPIC_OR_PARTITION (the topic may still be being created).
//
// Permanent: MESSAGE_TOO_LARGE (and kafka-go's MessageTooLargeError),
// INVALID_RECORD, CORRUPT_MESSAGE (kafka-go calls it temporary; the Java
// client treats it as a permanent record error), RECORD_LIST_TOO_LARGE,
// INVALID_TOPIC_EXCEPTION, TOPIC_AUTHORIZATION_FAILED,
// CLUSTER_AUTHORIZATION_FAILED, any other Kafka error kafka-go does not call
// temporary, context.Canceled, ErrClosed, ErrNoTopic and unknown errors.
func IsRetriable(err error) bool {
	if err == nil {
		return false
	}
	var pe *PublishError
	if errors.As(err, &pe) {
		any := false
		for _, e := range pe.Errs {
			if e == nil {
				continue
			}
			if !IsRetriable(e) {
				return false
			}
			any = true
		}
		return any
	}
	switch {
	case errors.Is(err, ErrNotAttempted):
		return true
	case errors.Is(err, ErrClosed), errors.Is(err, io.ErrClosedPipe),
		errors.Is(err, ErrNoTopic), errors.Is(err, context.Canceled):
		return false
	}
	if IsRecordRejected(err) {
		return false
	}
	var ke kafkago.Error
	if errors.As(err, &ke) {
		switch ke {
		case kafkago.NotLeaderForPartition, kafkago.LeaderNotAvailable,
			kafkago.RequestTimedOut, kafkago.NotEnoughReplicas,
			kafkago.NotEnoughReplicasAfterAppend, kafkago.UnknownTopicOrPartition,
			kafkago.NetworkException, kafkago.BrokerNotAvailable:
			return true
		}
		return ke.Temporary()
	}
	return isNetworkError(err)
}

// isNetworkError reports whether err says the broker was not reached or
// did not answer in time.
func isNetworkError(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne)
}

// IsRecordRejected reports whether the broker refused err's message for
// reasons in the message itself or its destination, so that sending it again
// unchanged cannot succeed: MESSAGE_TOO_LARGE (also kafka-go's local
// MessageTooLargeError), INVALID_RECORD, CORRUPT_MESSAGE,
// RECORD_LIST_TOO_LARGE, INVALID_TOPIC_EXCEPTION,
// TOPIC_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED. The relay
// dead-letters such an event at once. Unlike !IsRetriable, an unknown error
// is not a rejection: it is retried up to the relay's max attempts.
func IsRecordRejected(err error) bool {
	if err == nil {
		return false
	}
	var tooLarge kafkago.MessageTooLargeError
	if errors.As(err, &tooLarge) {
		return true
	}
	var ke kafkago.Error
	if errors.As(err, &ke) {
		switch ke {
		case kafkago.MessageSizeTooLarge, kafkago.InvalidRecord, kafkago.InvalidMessage,
			kafkago.RecordListTooLarge, kafkago.InvalidTopic,
			kafkago.TopicAuthorizationFailed, kafkago.ClusterAuthorizationFailed:
			return true
		}
	}
	return false
}

// IsUnreachable reports whether err means the broker was not reached or did
// not answer (a network error, a timeout, ErrNotAttempted) rather than the
// broker answering with an error code. The relay does not count such
// failures toward an event's max attempts: an outage is not a poison event.
func IsUnreachable(err error) bool {
	if err == nil {
		return false
	}
	var ke kafkago.Error
	if errors.As(err, &ke) {
		return ke == kafkago.NetworkException || ke == kafkago.BrokerNotAvailable
	}
	return errors.Is(err, ErrNotAttempted) || isNetworkError(err)
}

// Error reasons returned by ErrorReason: a small fixed set, fit for a
// metrics label.
const (
	ReasonUnreachable     = "unreachable"       // no answer from a broker (network, timeout)
	ReasonMessageTooLarge = "message_too_large" // MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, local size check
	ReasonInvalidRecord   = "invalid_record"    // INVALID_RECORD, CORRUPT_MESSAGE
	ReasonNotLeader       = "not_leader"        // NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE
	ReasonNotEnoughISR    = "not_enough_replicas"
	ReasonTimeout         = "request_timed_out" // REQUEST_TIMED_OUT from the broker
	ReasonUnknownTopic    = "unknown_topic"     // UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION
	ReasonAuthorization   = "authorization"     // TOPIC_ or CLUSTER_AUTHORIZATION_FAILED
	ReasonOther           = "other"
)

// ErrorReason classifies a publish error into one of the Reason*
// constants.
func ErrorReason(err error) string {
	var tooLarge kafkago.MessageTooLargeError
	if errors.As(err, &tooLarge) {
		return ReasonMessageTooLarge
	}
	var ke kafkago.Error
	if errors.As(err, &ke) {
		switch ke {
		case kafkago.MessageSizeTooLarge, kafkago.RecordListTooLarge:
			return ReasonMessageTooLarge
		case kafkago.InvalidRecord, kafkago.InvalidMessage:
			return ReasonInvalidRecord
		case kafkago.NotLeaderForPartition, kafkago.LeaderNotAvailable:
			return ReasonNotLeader
		case kafkago.NotEnoughReplicas, kafkago.NotEnoughReplicasAfterAppend:
			return ReasonNotEnoughISR
		case kafkago.RequestTimedOut:
			return ReasonTimeout
		case kafkago.UnknownTopicOrPartition, kafkago.InvalidTopic:
			return ReasonUnknownTopic
		case kafkago.TopicAuthorizationFailed, kafkago.ClusterAuthorizationFailed:
			return ReasonAuthorization
		}
	}
	if errors.Is(err, kafkago.MessageSizeTooLarge) {
		return ReasonMessageTooLarge
	}
	if IsUnreachable(err) {
		return ReasonUnreachable
	}
	return ReasonOther
}

// ErrMessageTooLarge is Kafka's MESSAGE_TOO_LARGE (kafka-go's
// MessageSizeTooLarge, error code 10). Callers that refuse an oversized
// message before sending it wrap it, so IsRecordRejected and ErrorReason
// treat it like the broker's answer.
var ErrMessageTooLarge error = kafkago.MessageSizeTooLarge
