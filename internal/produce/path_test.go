package produce

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/pgoutbox/outbox/kafka"
)

// fakeSend is a SendFunc that records each request's keys and answers it
// with answer.
type fakeSend struct {
	reqs   [][]string
	answer func(msgs []kafka.Message) error
}

func (f *fakeSend) send(_ context.Context, msgs []kafka.Message) error {
	var keys []string
	for _, m := range msgs {
		keys = append(keys, string(m.Value))
	}
	f.reqs = append(f.reqs, keys)
	return f.answer(msgs)
}

func pathMessages(spec ...string) []kafka.Message {
	msgs := make([]kafka.Message, len(spec))
	for i, s := range spec {
		key, _, _ := strings.Cut(s, "/")
		msgs[i] = kafka.Message{Topic: "t", Key: []byte(key), Value: []byte(s)}
	}
	return msgs
}

func outcomes(res []Result) string {
	var b strings.Builder
	for i, r := range res {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(r.Outcome.String())
	}
	return b.String()
}

// A request the broker refuses as a whole for a record in it (a record
// batch too large) is sent again one message at a time; only the record
// refused alone is a dead letter, and the later messages of its key are
// held, not sent.
func TestPathSendsRejectedRecordsAgainOneAtATime(t *testing.T) {
	f := &fakeSend{answer: func(msgs []kafka.Message) error {
		errs := make([]error, len(msgs))
		failed := false
		for i, m := range msgs {
			if len(msgs) > 1 || string(m.Value) == "a/2" {
				errs[i], failed = fmt.Errorf("partition 0: %w", kafkago.MessageSizeTooLarge), true
			}
		}
		if !failed {
			return nil
		}
		return &PublishError{Errs: errs}
	}}
	res := Path{Send: f.send, MaxBytes: 1 << 20, MaxMessages: 100}.Publish(context.Background(),
		pathMessages("a/1", "a/2", "b/1", "a/3", "b/2"))
	if got, want := outcomes(res), "published dead_letter published held published"; got != want {
		t.Errorf("outcomes %s, want %s", got, want)
	}
	if res[1].Reason != "message_too_large" || !errors.Is(res[1].Err, ErrMessageTooLarge) {
		t.Errorf("dead letter %q %v", res[1].Reason, res[1].Err)
	}
	if got, want := fmt.Sprint(f.reqs), "[[a/1 a/2 b/1 a/3 b/2] [a/1] [a/2] [b/1] [b/2]]"; got != want {
		t.Errorf("requests %s, want %s", got, want)
	}
}

// Requests are cut by MaxMessages and MaxBytes; a message over MaxBytes
// alone is a dead letter without being sent, and its key's later messages
// are held.
func TestPathCutsRequests(t *testing.T) {
	f := &fakeSend{answer: func([]kafka.Message) error { return nil }}
	msgs := pathMessages("a/1", "b/1", "c/1", "a/2", "b/2", "c/2", "d/1")
	msgs[1].Value = make([]byte, 300) // b/1: over MaxBytes
	one := MessageSize(&msgs[0])
	res := Path{Send: f.send, MaxBytes: 3 * one, MaxMessages: 2}.Publish(context.Background(), msgs)
	if got, want := outcomes(res), "published dead_letter published published held published published"; got != want {
		t.Errorf("outcomes %s, want %s", got, want)
	}
	if !strings.Contains(res[1].Err.Error(), "over the publisher's limit") || res[1].Reason != "message_too_large" {
		t.Errorf("too large: %q %v", res[1].Reason, res[1].Err)
	}
	if got, want := fmt.Sprint(f.reqs), "[[a/1 c/1] [a/2 c/2] [d/1]]"; got != want {
		t.Errorf("requests %s, want %s", got, want)
	}
}

// When nothing of a call got through and every failure was an outage, the
// rest of the call is not sent; once something got through, the other keys
// go on.
func TestPathStopsOnAnOutage(t *testing.T) {
	down := fmt.Errorf("publish: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
	f := &fakeSend{answer: func([]kafka.Message) error { return down }}
	p := Path{Send: f.send, MaxBytes: 1 << 20, MaxMessages: 2}
	res := p.Publish(context.Background(), pathMessages("a/1", "b/1", "c/1", "d/1"))
	if got, want := outcomes(res), "retry_outage retry_outage unsent unsent"; got != want {
		t.Errorf("outcomes %s, want %s", got, want)
	}
	if res[0].Reason != "unreachable" || !errors.Is(res[2].Err, ErrNotAttempted) {
		t.Errorf("results %+v", res)
	}

	f.reqs = nil
	f.answer = func(msgs []kafka.Message) error {
		if string(msgs[0].Key) == "a" {
			return &PublishError{Errs: []error{kafkago.NotEnoughReplicas, nil}}
		}
		return kafkago.UnknownTopicOrPartition // not an answer per message
	}
	res = p.Publish(context.Background(), pathMessages("a/1", "b/1", "a/2", "c/1", "d/1"))
	if got, want := outcomes(res), "retry_outage published held retry_outage retry_outage"; got != want {
		t.Errorf("outcomes %s, want %s", got, want)
	}
	if res[1].Err != nil || res[0].Reason != "not_enough_replicas" {
		t.Errorf("results %+v", res)
	}
	// An error that is not an outage counts an attempt.
	f.answer = func([]kafka.Message) error { return errClosed }
	if got := outcomes(p.Publish(context.Background(), pathMessages("a/1"))); got != "retry_attempt" {
		t.Errorf("closed: %s", got)
	}
}
