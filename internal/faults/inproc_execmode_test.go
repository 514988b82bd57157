package faults

// Every pgx query exec mode a user may put in the database URL
// (default_query_exec_mode: PgBouncer users set exec or simple_protocol,
// since a transaction pooler cannot keep prepared statements) works for
// every statement the relay runs: the writer, the claim with its floor and
// order guard, mark, release with a backoff, dead-letter, requeue, the
// metrics gauges, the retention cleaner and the listener's watchdog ping.
// Before, with exec, every mark failed ("unable to encode []uuid.UUID ...
// into text format for unknown type (OID 0)") and each event was
// republished every lease, forever.

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/metrics"
	"github.com/pgoutbox/outbox/internal/retention"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/relay"
)

// withExecMode returns dsn with default_query_exec_mode=mode.
func withExecMode(t *testing.T, dsn, mode string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("default_query_exec_mode", mode)
	u.RawQuery = q.Encode()
	return u.String()
}

func TestInprocEveryQueryExecModeWorks(t *testing.T) {
	for _, mode := range []string{"cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := testenv.MigratedDB(t)
			dsn := withExecMode(t, db.ConnString, mode)
			pool, err := pgxpool.New(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			k := testenv.KafkaFake(t)
			topic := k.Topic(t, 2)
			// Failed publishes (kafka-go makes 3 attempts of each), then
			// normal service.
			k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.NotEnoughReplicas, Count: 6})
			m, err := metrics.New(metrics.Config{}, pool, nil)
			if err != nil {
				t.Fatal(err)
			}
			h := ipStartRelay(t, db, k.Brokers, topic, ipConfig{Pool: pool, ConnString: dsn,
				Relay: relay.Config{RetryMin: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond, PollInterval: 50 * time.Millisecond, Observer: m}})
			w, err := outbox.NewWriter(outbox.WriterConfig{Channel: db.Schema, Wakeup: outbox.WakeupEveryTx})
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 10; i++ {
				ipInsert(t, pool, w, ipEvents(5, 2)...)
			}
			// The relay counts a mark after its UPDATE returned: the
			// table says published before Stats does.
			testenv.Eventually(t, 60*time.Second, func() bool { return ipUnpublished(t, pool) == 0 && h.Relay.Stats().Marked >= 100 },
				"%s: not published and counted (stats %+v)", mode, h.Relay.Stats())
			if st := h.Relay.Stats(); st.Failed == 0 || st.Marked < 100 {
				t.Errorf("%s: stats %+v: want failures retried and every event marked", mode, st)
			}
			// A dead letter and its requeue.
			if _, err := pool.Exec(ctx, "UPDATE outbox SET published_at = NULL, dead_lettered_at = now(), locked_until = 'infinity' WHERE seq = (SELECT min(seq) FROM outbox)"); err != nil {
				t.Fatal(err)
			}
			if n, err := h.Claimer.Requeue(ctx, nil); err != nil || n != 1 {
				t.Fatalf("%s: requeue: %d %v", mode, n, err)
			}
			testenv.Eventually(t, 20*time.Second, func() bool { return ipUnpublished(t, pool) == 0 }, "%s: requeued event not published", mode)
			if _, err := m.Refresh(ctx); err != nil {
				t.Errorf("%s: gauges: %v", mode, err)
			}
			c, err := retention.New(retention.Config{Retention: 0}, pool, nil)
			if err != nil {
				t.Fatal(err)
			}
			if p, err := c.Clean(ctx); err != nil || p.Deleted == 0 {
				t.Errorf("%s: retention pass: %+v %v", mode, p, err)
			}
			if h.Listener.Reconnects() != 1 {
				t.Errorf("%s: the listener reconnected %d times (its watchdog ping failing?)", mode, h.Listener.Reconnects())
			}
			if strings.Contains(mode, "cache") {
				return
			}
			// The claim's statements were not prepared.
			var prepared int
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_statements").Scan(&prepared); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d prepared statements on one of the pool's sessions", mode, prepared)
		})
	}
}
