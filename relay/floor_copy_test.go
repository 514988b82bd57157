package relay_test

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/relay"
)

// COPY into the outbox evaluates the identity default for every buffered
// row before the first heap_multi_insert assigns the transaction an xid.
// A transaction then holds hundreds of seqs with no xid, more than the
// floor's max_connections margin.
//
// Found by a reviewer: the floor passed such rows and they were never
// published. Every 10 s a claim scans from the start, so they are.
func TestRowsCommittedBelowTheFloorArePublished(t *testing.T) {
	t.Parallel()
	db, k := testenv.MigratedDB(t), testenv.Kafka(t)
	topic := k.Topic(t, 1)
	h := startRelay(t, db, k, topic, opts{noNotify: true, relay: relay.Config{PollInterval: 50 * time.Millisecond}})
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db.ConnString)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	const n = 500
	pr, pw := io.Pipe()
	go func() {
		for i := 0; i < n; i++ {
			fmt.Fprintf(pw, "%s\tagg-copy\tt\t{\"n\":%d}\n", outbox.NewID(), i)
		}
		time.Sleep(1500 * time.Millisecond) // the source is slower than the relay's floor
		pw.Close()
	}()
	tag, err := conn.PgConn().CopyFrom(ctx, pr, "COPY outbox (id, aggregate_id, event_type, payload) FROM STDIN")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("COPY %d rows committed", tag.RowsAffected())
	testenv.Eventually(t, 30*time.Second, func() bool { return unpublished(t, db) == 0 },
		"COPY rows left unpublished (stats %+v)", h.relay.Stats())
}
