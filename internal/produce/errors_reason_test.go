package produce

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
		{fmt.Errorf("publish: %w", kafkago.MessageSizeTooLarge), reasonMessageTooLarge},
		{kafkago.MessageTooLargeError{}, reasonMessageTooLarge},
		{kafkago.InvalidMessage, reasonInvalidRecord},
		{kafkago.NotLeaderForPartition, reasonNotLeader},
		{kafkago.NotEnoughReplicasAfterAppend, reasonNotEnoughISR},
		{kafkago.RequestTimedOut, reasonTimeout},
		{kafkago.UnknownTopicOrPartition, reasonUnknownTopic},
		{kafkago.TopicAuthorizationFailed, reasonAuthorization},
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), reasonUnreachable},
		{context.DeadlineExceeded, reasonUnreachable},
		{errors.New("something else"), reasonOther},
		// The fenced path's: a transaction not committed, and a coordinator
		// busy past the call's time (CONCURRENT_TRANSACTIONS is not a
		// temporary error for kafka-go), are outages.
		{fmt.Errorf("%w: %w", errAborted, kafkago.ProducerFenced), reasonTransaction},
		{fmt.Errorf("%w: add partitions: %w (%w)", errCoordinator, context.DeadlineExceeded, kafkago.ConcurrentTransactions), reasonCoordinator},
		{fmt.Errorf("%w: init producer id: %w", errCoordinator, kafkago.TransactionalIDAuthorizationFailed), reasonAuthorization},
	} {
		if got := ErrorReason(tc.err); got != tc.want {
			t.Errorf("ErrorReason(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
