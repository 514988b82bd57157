package produce

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"

	"github.com/pgoutbox/outbox/internal/serde"
)

// errClosed is returned (wrapped) by Publish, Ping and CheckTopics after
// Close.
var errClosed = errors.New("kafka: publisher closed")

// ErrNotAttempted is the error of Unsent messages of a Publish call: not
// sent because everything the call tried failed for an outage (see
// Path.Publish). It is retriable.
var ErrNotAttempted = errors.New("kafka: not attempted after earlier failure")

// errNoTopic is returned (wrapped, as a whole-call error) when a message has
// an empty Topic and Config.Topic is empty too. It is not retriable: it is a
// configuration error.
var errNoTopic = errors.New("kafka: Config.Topic: empty and message has no topic")

// ErrMessageTooLarge is Kafka's MESSAGE_TOO_LARGE (kafka-go's
// MessageSizeTooLarge, error code 10). Callers that refuse an oversized
// message before sending it wrap it, so IsRecordRejected and ErrorReason
// treat it like the broker's answer.
var ErrMessageTooLarge error = kafkago.MessageSizeTooLarge

// errInvalidTopic is Kafka's INVALID_TOPIC_EXCEPTION (kafka-go's
// InvalidTopic, error code 17): a topic name Kafka never accepts. Publish
// and the topic check wrap it for a name that breaks Kafka's rules, before
// anything is sent; classify treats it as a rejection of the record.
var errInvalidTopic error = kafkago.InvalidTopic

// errAuthentication is wrapped by the errors of Ping, CheckTopics and
// Publish when the broker refused the SASL authentication: wrong password
// or unknown user (SASL_AUTHENTICATION_FAILED, or the broker closing the
// connection during the exchange, which brokers may do instead of
// answering; kfake always does), a mechanism the listener does not enable
// (UNSUPPORTED_SASL_MECHANISM, see the broker's sasl.enabled.mechanisms),
// or a listener without SASL (ILLEGAL_SASL_STATE). Error codes:
// https://kafka.apache.org/protocol#protocol_error_codes. The message names
// Config.SASLMechanism and Config.SASLUsername, never the password.
// classify gives it classOutage and reasonAuthentication. Test with
// IsAuthentication.
var errAuthentication = errors.New("kafka: SASL authentication failed")

// ErrTLS is wrapped by the errors of Ping, CheckTopics and Publish when the
// TLS handshake with a broker failed: the listener does not speak TLS (it
// answers plaintext Kafka requests, answered bytes that are no TLS record,
// or closed the connection without answering), the broker's certificate is
// not trusted, or the broker refused ours. The message names the broker and
// the cause. A plaintext listener is recognized about 250ms into the
// handshake, not after Config.DialTimeout. A broker that answers nothing at
// all within Config.DialTimeout is an outage, not ErrTLS. classify gives it
// classOutage and reasonTLS. Test with IsTLS.
var ErrTLS = errors.New("kafka: TLS handshake failed")

// errNotKafka is wrapped by Ping's error for a broker address whose
// server answered in another protocol (an HTTP or PostgreSQL port given as
// a broker): waiting will not make it a broker, so start-up stops at
// once. classify gives it classOutage (a condition of the connection,
// never of a record). Test with IsNotKafka.
var errNotKafka = errors.New("kafka: the server did not answer as a Kafka broker")

// IsNotKafka reports whether err wraps errNotKafka.
func IsNotKafka(err error) bool { return errors.Is(err, errNotKafka) }

// IsAuthentication reports whether err wraps errAuthentication.
func IsAuthentication(err error) bool { return errors.Is(err, errAuthentication) }

// IsTLS reports whether err wraps ErrTLS.
func IsTLS(err error) bool { return errors.Is(err, ErrTLS) }

// PublishError reports per-message results of a Publish call in which some
// messages were not delivered. len(Errs) == len(msgs); Errs[i] is nil if
// msgs[i] was acknowledged by all in-sync replicas, else the reason it was
// not. Use classify (or IsRetriable, IsRecordRejected, IsOutage) on
// each non-nil entry to decide what to do with it.
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

// missingTopicError is returned (wrapped) by CheckTopics when topics do not
// exist: the broker answered UNKNOWN_TOPIC_OR_PARTITION for them, or
// listed them without partitions. It unwraps to kafka-go's
// UnknownTopicOrPartition, so classify calls it an outage (the topic may
// still be created). Test with isMissingTopic.
type missingTopicError struct {
	// Topics are the missing topics, in the order CheckTopics was given
	// them.
	Topics []string
	// Broker is the address (host:port, from Config.Brokers) of the broker
	// that answered.
	Broker string
	// AutoCreate is Config.AutoCreateTopic: the broker was asked to create
	// the topics and did not (its auto.create.topics.enable is off).
	AutoCreate bool
}

// Error names every missing topic and the broker, and what to do, e.g.
// `kafka: topic "payments" does not exist (broker kafka1:9092): create it,
// or enable Config.AutoCreateTopic (outbox-relay: --kafka-auto-create-topics)`.
func (e *missingTopicError) Error() string {
	quoted := make([]string, len(e.Topics))
	for i, t := range e.Topics {
		quoted[i] = fmt.Sprintf("%q", t)
	}
	what := "topic " + quoted[0] + " does not exist"
	if len(quoted) > 1 {
		what = "topics " + strings.Join(quoted, ", ") + " do not exist"
	}
	if e.AutoCreate {
		return fmt.Sprintf("kafka: %s (broker %s) and the broker did not create it on request "+
			"(its auto.create.topics.enable is off): create it", what, e.Broker)
	}
	return fmt.Sprintf("kafka: %s (broker %s): create it, or enable Config.AutoCreateTopic "+
		"(outbox-relay: --kafka-auto-create-topics) on a broker with auto.create.topics.enable", what, e.Broker)
}

// Unwrap returns kafka-go's UnknownTopicOrPartition, the broker's answer.
func (e *missingTopicError) Unwrap() error { return kafkago.UnknownTopicOrPartition }

// isMissingTopic reports whether err wraps a *missingTopicError.
func isMissingTopic(err error) bool {
	var mt *missingTopicError
	return errors.As(err, &mt)
}

// class says what to do about a publish error; see classify.
type class int

const (
	// classNone is the class of a nil error.
	classNone class = iota
	// classOutage: the cluster cannot take records now, whatever the
	// record: no broker reached or answering in time, the connection
	// refused by TLS or SASL, the relay not authorized to write the topic,
	// a partition without a leader or with fewer in-sync replicas than
	// min.insync.replicas, a request timed out on the broker, the broker's
	// storage failing, the topic or partition missing, the record
	// timestamps refused (each record is stamped with its send time,
	// so that is a clock or configuration matter), throttling, or the
	// message not sent because of another one (ErrNotAttempted). Sending
	// the same record again once the condition ends succeeds. The relay
	// counts no attempt toward a dead letter for it and backs off as a
	// whole while nothing gets through: a cluster condition is never the
	// event's fault.
	classOutage
	// classRejected: permanent for this record: the broker (or Publish,
	// checking the same rule locally) refused the record itself or its
	// destination's name (MESSAGE_TOO_LARGE, INVALID_RECORD,
	// CORRUPT_MESSAGE, RECORD_LIST_TOO_LARGE, INVALID_TOPIC_EXCEPTION).
	// Retrying the same record can never succeed; the relay dead-letters
	// it at once.
	classRejected
	// classOther: not known to be either: the publisher is closed, the call
	// was canceled, a configuration error (errNoTopic), a Kafka error
	// kafka-go does not call temporary (e.g. UNSUPPORTED_VERSION,
	// POLICY_VIOLATION), or an error we do not recognize. The relay retries
	// it with backoff and counts attempts, up to its max attempts.
	classOther
)

// String returns "none", "outage", "rejected" or "other".
func (c class) String() string {
	switch c {
	case classNone:
		return "none"
	case classOutage:
		return "outage"
	case classRejected:
		return "rejected"
	case classOther:
		return "other"
	}
	return fmt.Sprintf("class(%d)", int(c))
}

// Error reasons returned by classify and ErrorReason: a small fixed set,
// fit for a metrics label.
const (
	reasonUnreachable      = "unreachable"       // no answer from a broker (network, timeout), ErrNotAttempted
	reasonMessageTooLarge  = "message_too_large" // MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, local size check
	reasonInvalidRecord    = "invalid_record"    // INVALID_RECORD, CORRUPT_MESSAGE
	reasonNotLeader        = "not_leader"        // NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, no leader in the metadata
	reasonNotEnoughISR     = "not_enough_replicas"
	reasonTimeout          = "request_timed_out" // REQUEST_TIMED_OUT from the broker
	reasonUnknownTopic     = "unknown_topic"     // UNKNOWN_TOPIC_OR_PARTITION, a topic or partition missing from the metadata, missingTopicError
	reasonInvalidTopic     = "invalid_topic"     // INVALID_TOPIC_EXCEPTION, an illegal name refused locally (rejected)
	reasonAuthorization    = "authorization"     // TOPIC_ or CLUSTER_AUTHORIZATION_FAILED
	reasonAuthentication   = "authentication"    // errAuthentication: SASL refused
	reasonTLS              = "tls"               // ErrTLS: TLS handshake failed
	reasonInvalidTimestamp = "invalid_timestamp" // INVALID_TIMESTAMP: the broker's message.timestamp.*.max.ms refused the send time
	reasonThrottled        = "throttled"         // THROTTLING_QUOTA_EXCEEDED
	reasonTransaction      = "transaction"       // errAborted: the write's transaction ended without a commit (Config.Fence)
	reasonCoordinator      = "coordinator"       // errCoordinator: InitProducerID, AddPartitionsToTxn or EndTxn failed
	reasonSchema           = "schema"            // serde.ErrSchema: the payload does not fit its schema
	reasonRegistry         = "registry"          // serde.ErrRegistry: the Schema Registry is unreachable or refuses
	reasonNoSubject        = "no_subject"        // serde.ErrNoSubject: the event's schema is not registered
	reasonOther            = "other"
)

// classRule is one row of the classification table: the first row whose
// match reports true for an error classifies it.
type classRule struct {
	match  func(error) bool
	class  class
	reason string
}

func is(targets ...error) func(error) bool {
	return func(err error) bool {
		for _, t := range targets {
			if errors.Is(err, t) {
				return true
			}
		}
		return false
	}
}

func code(codes ...kafkago.Error) func(error) bool {
	return func(err error) bool {
		var ke kafkago.Error
		if !errors.As(err, &ke) {
			return false
		}
		for _, c := range codes {
			if ke == c {
				return true
			}
		}
		return false
	}
}

// classRules is the one place that classifies errors; the order matters.
// Kafka error codes: https://kafka.apache.org/protocol#protocol_error_codes.
// The line between classOutage and classRejected is whether the same
// record can ever be accepted: a record is only ever rejected for itself
// (its size, its bytes, its topic's name); everything the cluster's state
// or configuration decides is an outage.
var classRules = []classRule{
	// Our own sentinels first: they wrap lower-level causes (a timeout, an
	// EOF) that would otherwise read as an unreachable broker.
	{is(errAuthentication), classOutage, reasonAuthentication},
	{is(ErrTLS), classOutage, reasonTLS},
	{is(ErrNotAttempted), classOutage, reasonUnreachable},
	{is(errAborted), classOutage, reasonTransaction},
	{is(serde.ErrSchema), classRejected, reasonSchema},
	{is(serde.ErrRegistry), classOutage, reasonRegistry},
	{is(serde.ErrNoSubject), classOutage, reasonNoSubject},
	{is(errClosed, io.ErrClosedPipe, errNoTopic, context.Canceled), classOther, reasonOther},
	// After errClosed (a call stopped by Close or shutdown is not an
	// outage); an authorization refusal in it is reported as such.
	{func(err error) bool {
		return errors.Is(err, errCoordinator) && !code(kafkago.ClusterAuthorizationFailed, kafkago.TransactionalIDAuthorizationFailed)(err)
	}, classOutage, reasonCoordinator},
	{func(err error) bool {
		var tooLarge kafkago.MessageTooLargeError
		return errors.As(err, &tooLarge)
	}, classRejected, reasonMessageTooLarge},
	{code(kafkago.MessageSizeTooLarge, kafkago.RecordListTooLarge), classRejected, reasonMessageTooLarge},
	// CORRUPT_MESSAGE (kafka-go's InvalidMessage) is temporary for
	// kafka-go, but sending the same record bytes again cannot repair them.
	{code(kafkago.InvalidRecord, kafkago.InvalidMessage), classRejected, reasonInvalidRecord},
	{code(kafkago.InvalidTopic), classRejected, reasonInvalidTopic},
	// An ACL the relay's principal lacks is the cluster's configuration,
	// not the event's: granting it makes the same record acceptable.
	{code(kafkago.TopicAuthorizationFailed, kafkago.ClusterAuthorizationFailed, kafkago.TransactionalIDAuthorizationFailed), classOutage, reasonAuthorization},
	// SASL error codes reach here only when not wrapped by
	// annotateAuth (e.g. a caller's own kafka-go error values).
	{code(kafkago.SASLAuthenticationFailed, kafkago.UnsupportedSASLMechanism, kafkago.IllegalSASLState),
		classOutage, reasonAuthentication},
	{code(kafkago.NotLeaderForPartition, kafkago.LeaderNotAvailable, kafkago.FencedLeaderEpoch, kafkago.UnknownLeaderEpoch),
		classOutage, reasonNotLeader},
	// kafka-go's own: its metadata names no leader for the partition.
	{is(protocol.ErrNoLeader), classOutage, reasonNotLeader},
	{code(kafkago.NotEnoughReplicas, kafkago.NotEnoughReplicasAfterAppend), classOutage, reasonNotEnoughISR},
	{code(kafkago.RequestTimedOut), classOutage, reasonTimeout},
	{code(kafkago.UnknownTopicOrPartition), classOutage, reasonUnknownTopic},
	{is(protocol.ErrNoTopic, protocol.ErrNoPartition), classOutage, reasonUnknownTopic},
	{code(kafkago.InvalidTimestamp), classOutage, reasonInvalidTimestamp},
	{code(kafkago.ThrottlingQuotaExceeded), classOutage, reasonThrottled},
	{code(kafkago.NetworkException, kafkago.BrokerNotAvailable), classOutage, reasonUnreachable},
	// Every other code kafka-go calls temporary (KAFKA_STORAGE_ERROR,
	// COORDINATOR_LOAD_IN_PROGRESS, ...) describes the cluster's state.
	{func(err error) bool {
		var ke kafkago.Error
		return errors.As(err, &ke) && ke.Temporary()
	}, classOutage, reasonOther},
	{func(err error) bool {
		var ke kafkago.Error
		return errors.As(err, &ke)
	}, classOther, reasonOther},
	{isNetworkError, classOutage, reasonUnreachable},
}

// classify returns the class of an error returned by Publish, Ping or
// CheckTopics (or of one PublishError entry), and its reason, one of the
// Reason* constants. It is table-driven (classRules): the first rule that
// matches anywhere in err's chain wins, so our own sentinels (ErrTLS,
// errAuthentication, ErrNotAttempted, errClosed) take precedence over the
// causes they wrap. IsRetriable, IsRecordRejected, IsOutage and
// ErrorReason are views of it and never disagree.
//
// A *PublishError (anywhere in the chain) is classified by its failed
// entries: the most severe class among them, in the order classRejected,
// classOther, classOutage, with the reason of the first entry of that
// class; a PublishError without failed entries is classOther. nil is
// classNone with reason "".
func classify(err error) (class, string) {
	if err == nil {
		return classNone, ""
	}
	var pe *PublishError
	if errors.As(err, &pe) {
		best, reason := classNone, ""
		for _, e := range pe.Errs {
			if e == nil {
				continue
			}
			c, r := classify(e)
			if severity(c) > severity(best) {
				best, reason = c, r
			}
		}
		if best == classNone {
			return classOther, reasonOther
		}
		return best, reason
	}
	for _, r := range classRules {
		if r.match(err) {
			return r.class, r.reason
		}
	}
	return classOther, reasonOther
}

func severity(c class) int {
	switch c {
	case classOutage:
		return 1
	case classOther:
		return 2
	case classRejected:
		return 3
	}
	return 0
}

// isNetworkError reports whether err says the broker was not reached, did
// not answer in time, or answered in another protocol (io.ErrNoProgress:
// kafka-go's reading of an answer that is not Kafka's, a condition of the
// connection, not of a record).
func isNetworkError(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.ErrNoProgress) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne)
}

// IsRetriable reports whether err is transient, i.e. sending the same
// message again later may succeed: classify(err) is classOutage. For a
// *PublishError it reports whether every failed message is; callers
// should normally check Errs[i] one by one instead. nil is not retriable.
// Startup retries Ping while it is.
func IsRetriable(err error) bool {
	c, _ := classify(err)
	return c == classOutage
}

// IsRecordRejected reports whether classify(err) is classRejected: the
// broker refused err's message for reasons in the message itself or its
// destination's name, so that sending it again unchanged cannot succeed:
// MESSAGE_TOO_LARGE (also kafka-go's local MessageTooLargeError),
// INVALID_RECORD, CORRUPT_MESSAGE, RECORD_LIST_TOO_LARGE,
// INVALID_TOPIC_EXCEPTION (also a topic name Publish refuses locally, see
// outbox.ValidateTopic). The relay dead-letters such an event at once. For a
// *PublishError: whether any entry is a rejection.
func IsRecordRejected(err error) bool {
	c, _ := classify(err)
	return c == classRejected
}

// IsOutage reports whether classify(err) is classOutage: a condition of the
// cluster (or of the connection to it), not of the record. The relay does
// not count such failures toward an event's max attempts. For a
// *PublishError: whether every failed entry is.
func IsOutage(err error) bool {
	c, _ := classify(err)
	return c == classOutage
}

// ErrorReason returns the reason classify gives err: one of the Reason*
// constants. For nil it returns reasonOther, as it always has.
func ErrorReason(err error) string {
	if err == nil {
		return reasonOther
	}
	_, r := classify(err)
	return r
}

// annotateAuth wraps errAuthentication around a SASL error code kafka-go
// returned (SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM,
// ILLEGAL_SASL_STATE), naming the mechanism and user; other errors are
// returned unchanged.
func annotateAuth(err error, mechanism, user string) error {
	if err == nil || errors.Is(err, errAuthentication) {
		return err
	}
	var hint string
	switch {
	case errors.Is(err, kafkago.SASLAuthenticationFailed):
		hint = "the broker refused the credentials (wrong password or unknown user)"
	case errors.Is(err, kafkago.UnsupportedSASLMechanism):
		hint = "the listener does not enable this mechanism (broker setting sasl.enabled.mechanisms)"
	case errors.Is(err, kafkago.IllegalSASLState):
		hint = "the listener may not use SASL (security.protocol PLAINTEXT or SSL)"
	default:
		return err
	}
	if mechanism == "" {
		return fmt.Errorf("%w: no Config.SASLMechanism set: %s: %w", errAuthentication, hint, err)
	}
	return fmt.Errorf("%w: mechanism %s, user %q: %s: %w", errAuthentication, mechanism, user, hint, err)
}
