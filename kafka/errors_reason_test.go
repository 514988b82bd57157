package kafka

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	kafkago "github.com/segmentio/kafka-go"
)

func TestErrorReason(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("publish: %w", kafkago.MessageSizeTooLarge), ReasonMessageTooLarge},
		{kafkago.MessageTooLargeError{}, ReasonMessageTooLarge},
		{kafkago.InvalidMessage, ReasonInvalidRecord},
		{kafkago.NotLeaderForPartition, ReasonNotLeader},
		{kafkago.NotEnoughReplicasAfterAppend, ReasonNotEnoughISR},
		{kafkago.RequestTimedOut, ReasonTimeout},
		{kafkago.UnknownTopicOrPartition, ReasonUnknownTopic},
		{kafkago.TopicAuthorizationFailed, ReasonAuthorization},
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), ReasonUnreachable},
		{context.DeadlineExceeded, ReasonUnreachable},
		{errors.New("something else"), ReasonOther},
	} {
		if got := ErrorReason(tc.err); got != tc.want {
			t.Errorf("ErrorReason(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
