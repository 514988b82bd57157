package produce

import (
	"context"
	"errors"
	"fmt"

	"github.com/pgoutbox/outbox/kafka"
)

// Outcome is what became of one message of a Publish call, which is all
// the relay needs to decide what to do with its event.
type Outcome uint8

// The outcomes of a message.
const (
	// Published: every in-sync replica acknowledged the record.
	Published Outcome = iota
	// RetryOutage: not delivered, for a condition of the cluster or of
	// the connection to it (unreachable, no leader, not enough replicas,
	// timeouts, authorization, ...): retry once it passes, counting no
	// attempt.
	RetryOutage
	// RetryAttempt: not delivered, for a reason known to be neither the
	// cluster's nor the record's: retry with backoff, counting an attempt.
	RetryAttempt
	// DeadLetter: the broker (or the same rule checked before sending)
	// refused the record itself: too large, invalid, an illegal topic
	// name. Sending it again cannot succeed.
	DeadLetter
	// Held: not sent, because an earlier message with the same key failed
	// in this call; sent before it, it would overtake that one.
	Held
	// Unsent: not sent, because the call stopped before it: nothing of
	// the call was delivered and everything tried failed for an outage.
	Unsent
)

// String returns the outcome's name, e.g. "retry_outage".
func (o Outcome) String() string {
	switch o {
	case Published:
		return "published"
	case RetryOutage:
		return "retry_outage"
	case RetryAttempt:
		return "retry_attempt"
	case DeadLetter:
		return "dead_letter"
	case Held:
		return "held"
	case Unsent:
		return "unsent"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// Failed reports whether the message was tried and failed: RetryOutage,
// RetryAttempt or DeadLetter (not Held or Unsent, which were not sent).
func (o Outcome) Failed() bool {
	return o == RetryOutage || o == RetryAttempt || o == DeadLetter
}

// Result is what became of one message of a Publish call.
type Result struct {
	Outcome Outcome
	// Err is why the message was not published; nil when Published.
	Err error
	// Reason is a short reason from a small fixed set, for logs and
	// metrics labels ("unreachable", "message_too_large", "not_leader",
	// ...; see ErrorReason); "" when Published.
	Reason string
}

// ResultOf classifies err, the error of one message (nil: published),
// into its Result.
func ResultOf(err error) Result {
	c, reason := classify(err)
	switch c {
	case classNone:
		return Result{Outcome: Published}
	case classOutage:
		return Result{Outcome: RetryOutage, Err: err, Reason: reason}
	case classRejected:
		return Result{Outcome: DeadLetter, Err: err, Reason: reason}
	}
	return Result{Outcome: RetryAttempt, Err: err, Reason: reason}
}

// errHeld is the error of a Held message.
var errHeld = errors.New("held behind an earlier failed message of its key")

// SendFunc sends msgs, which fit in one produce request per partition, and
// returns nil when every one was acknowledged, a *PublishError with one
// entry per message, or an error for the whole call (nothing known to be
// delivered). Publisher.Send is one, on kafka-go's Writer; a producer on
// kafka-go's Client (InitProducerID, RawProduce) can be another.
type SendFunc func(ctx context.Context, msgs []kafka.Message) error

// Path is the one place that cuts a list of messages into produce requests
// and turns what the broker answered into a Result per message.
type Path struct {
	// Send sends one request's messages.
	Send SendFunc
	// MaxBytes bounds a request's messages by MessageSize (and one
	// message: larger is a DeadLetter); MaxMessages bounds their number.
	MaxBytes    int64
	MaxMessages int
	// Encode, if set, encodes each message's value before it is sent
	// (the Schema Registry formats: serde.Encoder.Encode), once per
	// message; a message it fails is not sent, and its error is
	// classified like the broker's.
	Encode func(context.Context, *kafka.Message) error
}

// Publish sends msgs in order, in requests of at most MaxMessages messages
// and MaxBytes bytes, one after the other, and returns one Result per
// message. It keeps each key's order: once a message fails, the later
// messages of its key in the call are Held, not sent. A record batch is
// refused as a whole (MESSAGE_TOO_LARGE is judged on the batch against
// the broker's message.max.bytes, INVALID_RECORD on any record in it), so
// the messages of a request of several that the broker rejected are sent
// again one at a time, in order, as the Java producer splits a batch that
// was too large: only a record rejected on its own is a DeadLetter. When
// a request delivered nothing and everything the call tried so far failed
// for an outage, the rest of the call is Unsent.
func (p Path) Publish(ctx context.Context, msgs []kafka.Message) []Result {
	res := make([]Result, len(msgs))
	c := pathCall{p: p, res: res, held: map[string]bool{}}
	for next := 0; next < len(msgs); {
		var idx []int
		idx, next = c.cut(ctx, msgs, next)
		if len(idx) == 0 {
			continue
		}
		c.send(ctx, msgs, idx)
		if !c.delivered && c.onlyOutage && c.failed {
			for i := next; i < len(msgs); i++ {
				res[i] = Result{Outcome: Unsent, Err: ErrNotAttempted, Reason: reasonUnreachable}
			}
			break
		}
	}
	return res
}

// pathCall is one Path.Publish call under way.
type pathCall struct {
	p   Path
	res []Result
	// held are the keys with a failed message in this call.
	held map[string]bool
	// delivered: a message was published; failed: one failed; onlyOutage:
	// every failure was RetryOutage.
	delivered, failed bool
	onlyOutage        bool
	// encoded is the index of the first message Path.Encode has not seen.
	encoded int
}

// cut returns the indexes of the next request's messages from msgs[next:]
// and the index after them. Messages of held keys become Held, and one
// that Path.Encode fails or over MaxBytes fails, without being sent.
func (c *pathCall) cut(ctx context.Context, msgs []kafka.Message, next int) ([]int, int) {
	var idx []int
	var size int64
	for ; next < len(msgs); next++ {
		m := &msgs[next]
		if c.held[string(m.Key)] {
			c.res[next] = Result{Outcome: Held, Err: errHeld, Reason: "held"}
			continue
		}
		if c.p.Encode != nil && next >= c.encoded {
			c.encoded = next + 1
			if err := c.p.Encode(ctx, m); err != nil {
				c.record(next, msgs, ResultOf(err))
				continue
			}
		}
		n := MessageSize(m)
		if n > c.p.MaxBytes {
			err := fmt.Errorf("event is %d bytes, over the publisher's limit of %d bytes (message.max.bytes): %w", n, c.p.MaxBytes, ErrMessageTooLarge)
			c.record(next, msgs, ResultOf(err))
			continue
		}
		if len(idx) > 0 && (len(idx) >= c.p.MaxMessages || size+n > c.p.MaxBytes) {
			break
		}
		size += n
		idx = append(idx, next)
	}
	return idx, next
}

// send sends the request of msgs' messages idx and records their results,
// sending the ones the broker rejected in a request of several again one
// at a time.
func (c *pathCall) send(ctx context.Context, msgs []kafka.Message, idx []int) {
	req := make([]kafka.Message, len(idx))
	for j, i := range idx {
		req[j] = msgs[i]
	}
	errs := perMessage(c.p.Send(ctx, req), len(req))
	for j, i := range idx {
		r := ResultOf(errs[j])
		if r.Outcome == DeadLetter && len(idx) > 1 {
			if c.held[string(msgs[i].Key)] {
				c.res[i] = Result{Outcome: Held, Err: errHeld, Reason: "held"}
				continue
			}
			r = ResultOf(perMessage(c.p.Send(ctx, req[j:j+1]), 1)[0])
		}
		c.record(i, msgs, r)
	}
}

// record sets msgs[i]'s result r.
func (c *pathCall) record(i int, msgs []kafka.Message, r Result) {
	c.res[i] = r
	if r.Outcome == Published {
		c.delivered = true
		return
	}
	c.held[string(msgs[i].Key)] = true
	if !c.failed {
		c.failed, c.onlyOutage = true, true
	}
	c.onlyOutage = c.onlyOutage && r.Outcome == RetryOutage
}

// perMessage spreads the error of a SendFunc over its n messages.
func perMessage(err error, n int) []error {
	errs := make([]error, n)
	var pe *PublishError
	switch {
	case err == nil:
	case errors.As(err, &pe) && len(pe.Errs) == n:
		copy(errs, pe.Errs)
	default:
		for i := range errs {
			errs[i] = err
		}
	}
	return errs
}
