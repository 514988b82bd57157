package outbox

import (
	"context"
	"fmt"
)

// Two-phase commit: PostgreSQL refuses PREPARE TRANSACTION in a
// transaction that executed NOTIFY (SQLSTATE 0A000, "cannot PREPARE a
// transaction that has executed LISTEN, UNLISTEN, or NOTIFY"), and Add's
// wake-up is a pg_notify inside the caller's transaction: with
// WakeupEveryTx every such transaction fails to prepare, with
// WakeupDebounced whichever one's turn it is. WithoutWakeup keeps Add's
// notifications out of a transaction that will be prepared; Notify wakes
// the relay after COMMIT PREPARED.

// withoutWakeupKey is the context key of WithoutWakeup.
type withoutWakeupKey struct{}

// WithoutWakeup returns a copy of ctx with which Add never notifies the
// relay, whatever WriterConfig.Wakeup says: pass it to every Add into a
// transaction that will be prepared (PREPARE TRANSACTION, two-phase
// commit), which PostgreSQL refuses after a NOTIFY. The events are found
// by the relay's poll (--poll-interval, 500ms by default), or at once if
// Notify is called after COMMIT PREPARED.
func WithoutWakeup(ctx context.Context) context.Context {
	return context.WithValue(ctx, withoutWakeupKey{}, true)
}

func withoutWakeup(ctx context.Context) bool {
	v, _ := ctx.Value(withoutWakeupKey{}).(bool)
	return v
}

// Notify wakes the relay now: it sends the writer's notification
// (pg_notify on WriterConfig.Channel) through q, which should not be in a
// transaction that will be prepared; on a pool or a connection outside a
// transaction it is delivered at once. For events added WithoutWakeup and
// committed by COMMIT PREPARED. Errors are wrapped as "outbox: notify: ...".
func (w *Writer) Notify(ctx context.Context, q Querier) error {
	if _, err := q.Exec(ctx, "SELECT pg_notify($1, '')", w.cfg.Channel); err != nil {
		return fmt.Errorf("outbox: notify: %w", err)
	}
	return nil
}
