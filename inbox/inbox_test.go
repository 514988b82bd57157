package inbox_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// setup returns a database with processed_events and a balances table
// that effects update.
func setup(t *testing.T) *testenv.TestDB {
	t.Helper()
	db := testenv.DB(t)
	ctx := context.Background()
	if err := inbox.Migrate(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	if err := inbox.Migrate(ctx, db.Pool); err != nil {
		t.Fatalf("second migrate: %v", err)
	}
	if _, err := db.Pool.Exec(ctx, "CREATE TABLE balances (account text PRIMARY KEY, amount int NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, "INSERT INTO balances VALUES ('acc', 0)"); err != nil {
		t.Fatal(err)
	}
	return db
}

func credit(ctx context.Context, n int) func(tx pgx.Tx) error {
	return func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "UPDATE balances SET amount = amount + $1 WHERE account = 'acc'", n)
		return err
	}
}

func balance(t *testing.T, db *testenv.TestDB) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), "SELECT amount FROM balances WHERE account = 'acc'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestRedeliveryIsAppliedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := setup(t)
	id := uuid.New()
	for i, want := range []bool{true, false, false} {
		applied, err := inbox.Handle(ctx, db.Pool, "billing", id, credit(ctx, 10))
		if err != nil || applied != want {
			t.Fatalf("delivery %d: applied %v, %v; want %v", i+1, applied, err, want)
		}
	}
	if b := balance(t, db); b != 10 {
		t.Fatalf("balance %d after three deliveries of one event, want 10", b)
	}
	// Another consumer processes the same event on its own.
	if applied, err := inbox.Handle(ctx, db.Pool, "ledger", id, credit(ctx, 1)); err != nil || !applied {
		t.Fatalf("other consumer: %v %v", applied, err)
	}
	// A different event is applied.
	if applied, err := inbox.Handle(ctx, db.Pool, "billing", uuid.New(), credit(ctx, 5)); err != nil || !applied {
		t.Fatalf("second event: %v %v", applied, err)
	}
	if b := balance(t, db); b != 16 {
		t.Fatalf("balance %d, want 16", b)
	}
}

func TestFailedEffectIsNotRecorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := setup(t)
	id := uuid.New()
	boom := errors.New("boom")
	applied, err := inbox.Handle(ctx, db.Pool, "billing", id, func(tx pgx.Tx) error {
		if err := credit(ctx, 10)(tx); err != nil {
			return err
		}
		return boom
	})
	if applied || !errors.Is(err, boom) {
		t.Fatalf("failing effect: applied %v, err %v; want false, boom", applied, err)
	}
	if b := balance(t, db); b != 0 {
		t.Fatalf("failed effect left balance %d", b)
	}
	// The redelivery is processed.
	if applied, err := inbox.Handle(ctx, db.Pool, "billing", id, credit(ctx, 10)); err != nil || !applied {
		t.Fatalf("redelivery after a failure: %v %v", applied, err)
	}
	if b := balance(t, db); b != 10 {
		t.Fatalf("balance %d, want 10", b)
	}
}

func TestProcessInTheCallersTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := setup(t)
	id := uuid.New()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first, err := inbox.Process(ctx, tx, "billing", id)
	if err != nil || !first {
		t.Fatalf("first: %v %v", first, err)
	}
	first, err = inbox.Process(ctx, tx, "billing", id)
	if err != nil || first {
		t.Fatalf("same event again in the same tx: %v %v", first, err)
	}
	_ = tx.Rollback(ctx)
	// Rolled back: not recorded.
	tx, err = db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if first, err := inbox.Process(ctx, tx, "billing", id); err != nil || !first {
		t.Fatalf("after rollback: %v %v", first, err)
	}
	if _, err := inbox.Process(ctx, tx, "", id); !errors.Is(err, inbox.ErrEmptyConsumer) {
		t.Fatalf("empty consumer: %v", err)
	}
	if _, err := inbox.Process(ctx, tx, "billing", uuid.Nil); !errors.Is(err, inbox.ErrNilEventID) {
		t.Fatalf("nil ID: %v", err)
	}
}

// waitBlockedBy waits until a backend waits for a lock held by the
// backend pid (the second delivery blocked on the first's uncommitted
// row).
func waitBlockedBy(t *testing.T, db *testenv.TestDB, pid uint32) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, func() bool {
		var waiting int
		err := db.Pool.QueryRow(context.Background(),
			"SELECT count(*) FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid))", int64(pid)).Scan(&waiting)
		return err == nil && waiting > 0
	}, "no delivery is waiting for the first one's lock")
}

// TestConcurrentDuplicateWaitsAndSkips: a duplicate delivered while the
// first delivery's transaction is still open waits for it, then skips.
func TestConcurrentDuplicateWaitsAndSkips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := setup(t)
	id := uuid.New()
	inside, release := make(chan struct{}), make(chan struct{})
	var pid uint32
	var firstApplied bool
	var firstErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		firstApplied, firstErr = inbox.Handle(ctx, db.Pool, "billing", id, func(tx pgx.Tx) error {
			pid = tx.Conn().PgConn().PID()
			close(inside)
			<-release
			return credit(ctx, 10)(tx)
		})
	}()
	<-inside
	second := make(chan error, 1)
	var secondApplied bool
	go func() {
		var err error
		secondApplied, err = inbox.Handle(ctx, db.Pool, "billing", id, credit(ctx, 10))
		second <- err
	}()
	waitBlockedBy(t, db, pid)
	close(release)
	<-done
	if err := <-second; err != nil || firstErr != nil {
		t.Fatal(err, firstErr)
	}
	if !firstApplied || secondApplied {
		t.Fatalf("applied: first %v, second %v; want true, false", firstApplied, secondApplied)
	}
	if b := balance(t, db); b != 10 {
		t.Fatalf("balance %d, want 10", b)
	}
}

// TestConcurrentDuplicateAppliesIfTheFirstRollsBack: the waiting duplicate
// applies the event when the first delivery's transaction fails.
func TestConcurrentDuplicateAppliesIfTheFirstRollsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := setup(t)
	id := uuid.New()
	inside, release := make(chan struct{}), make(chan struct{})
	var pid uint32
	done := make(chan error, 1)
	go func() {
		_, err := inbox.Handle(ctx, db.Pool, "billing", id, func(tx pgx.Tx) error {
			pid = tx.Conn().PgConn().PID()
			close(inside)
			<-release
			return errors.New("crash")
		})
		done <- err
	}()
	<-inside
	second := make(chan bool, 1)
	go func() {
		applied, err := inbox.Handle(ctx, db.Pool, "billing", id, credit(ctx, 10))
		if err != nil {
			t.Error(err)
		}
		second <- applied
	}()
	waitBlockedBy(t, db, pid)
	close(release)
	if err := <-done; err == nil {
		t.Fatal("first delivery did not fail")
	}
	if !<-second {
		t.Fatal("the duplicate was skipped although the first delivery rolled back")
	}
	if b := balance(t, db); b != 10 {
		t.Fatalf("balance %d, want 10", b)
	}
}

func TestManyConcurrentDuplicatesApplyOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := setup(t)
	for round := range 20 {
		id := uuid.New()
		var applied atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ok, err := inbox.Handle(ctx, db.Pool, "billing", id, credit(ctx, 1))
				if err != nil {
					t.Error(err)
				}
				if ok {
					applied.Add(1)
				}
			}()
		}
		close(start)
		wg.Wait()
		if n := applied.Load(); n != 1 {
			t.Fatalf("round %d: applied %d times, want 1", round, n)
		}
	}
	if b := balance(t, db); b != 20 {
		t.Fatalf("balance %d after 20 events delivered twice concurrently, want 20", b)
	}
}

func TestConcurrentMigrate(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = inbox.Migrate(context.Background(), db.Pool) }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestEventID(t *testing.T) {
	t.Parallel()
	id := uuid.New()
	other := uuid.New()
	got, err := inbox.EventID([]kafka.Header{
		{Key: "event_type", Value: []byte("t")},
		{Key: "event_id", Value: []byte(id.String())},
		{Key: "event_id", Value: []byte(other.String())}, // a row header shadowing it comes later
	})
	if err != nil || got != id {
		t.Fatalf("EventID = %s, %v; want %s", got, err, id)
	}
	if _, err := inbox.EventID(nil); !errors.Is(err, inbox.ErrNoEventID) {
		t.Fatalf("no header: %v", err)
	}
	if _, err := inbox.EventID([]kafka.Header{{Key: "event_id", Value: []byte("nope")}}); err == nil || errors.Is(err, inbox.ErrNoEventID) {
		t.Fatalf("bad header: %v", err)
	}
}

// TestMigrateReportsANameTakenByAType: a non-table object named
// processed_events makes Migrate fail instead of reporting success without
// a table (and, in the caller's transaction, leaving it aborted).
func TestMigrateReportsANameTakenByAType(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.DB(t)
	if _, err := db.Pool.Exec(ctx, "CREATE TYPE processed_events AS ENUM ('a')"); err != nil {
		t.Fatal(err)
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := inbox.Migrate(ctx, tx); err == nil {
		t.Fatal("Migrate returned nil although the name is taken by a type and no table was created")
	}
}
