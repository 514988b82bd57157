package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testenv"
)

// TestWithoutWakeupLetsTheTransactionBePrepared: PREPARE TRANSACTION fails
// (0A000) in a transaction that executed NOTIFY, so with a wake-up in the
// transaction (every one with WakeupEveryTx; with the default debounced
// mode, whichever transaction's turn it is) a two-phase commit fails. With
// outbox.WithoutWakeup on the ctx, Add never notifies: every prepare and
// COMMIT PREPARED succeeds and commits the events, and Writer.Notify wakes
// the relay afterwards, outside the prepared transaction.
func TestWithoutWakeupLetsTheTransactionBePrepared(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	w, err := outbox.NewWriter(outbox.WriterConfig{Wakeup: outbox.WakeupEveryTx, Channel: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, db.ConnString)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	listen, err := pgx.Connect(ctx, db.ConnString)
	if err != nil {
		t.Fatal(err)
	}
	defer listen.Close(ctx)
	if _, err := listen.Exec(ctx, "LISTEN "+pgx.Identifier{db.Schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	gid := func(i int) string { return fmt.Sprintf("%s-%d", db.Schema, i) }
	t.Cleanup(func() {
		for i := range 11 {
			_, _ = db.Pool.Exec(context.Background(), "ROLLBACK PREPARED '"+gid(i)+"'")
		}
	})
	ev := func() outbox.Event {
		return outbox.Event{ID: outbox.NewID(), AggregateID: "a", Type: "t", Payload: json.RawMessage(`{}`)}
	}
	prepare := func(ctx context.Context, i int) error {
		if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
			t.Fatal(err)
		}
		if err := w.Add(ctx, conn, ev()); err != nil {
			t.Fatal(err)
		}
		_, err := conn.Exec(ctx, "PREPARE TRANSACTION '"+gid(i)+"'")
		return err
	}

	// The failure the option avoids.
	var pgErr *pgconn.PgError
	if err := prepare(ctx, 10); !errors.As(err, &pgErr) || pgErr.Code != "0A000" {
		t.Fatalf("PREPARE after a notifying Add: %v; want SQLSTATE 0A000 (cannot PREPARE a transaction that has executed LISTEN, UNLISTEN, or NOTIFY)", err)
	}

	pctx := outbox.WithoutWakeup(ctx)
	for i := range 10 {
		if err := prepare(pctx, i); err != nil {
			t.Fatalf("prepare %d with WithoutWakeup: %v", i, err)
		}
		if _, err := db.Pool.Exec(ctx, "COMMIT PREPARED '"+gid(i)+"'"); err != nil {
			t.Fatalf("commit prepared %d: %v", i, err)
		}
	}
	var n int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM outbox").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 10 {
		t.Fatalf("%d events committed, want 10", n)
	}
	// No notification came from the prepared transactions: the first one
	// to arrive is Notify's.
	if err := w.Notify(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, "SELECT pg_notify($1, 'sentinel')", db.Schema); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, want := range []string{"", "sentinel"} {
		got, err := listen.WaitForNotification(wctx)
		if err != nil {
			t.Fatal(err)
		}
		if got.Payload != want {
			t.Fatalf("notification %q, want %q (Notify's, then the sentinel)", got.Payload, want)
		}
	}
}
