package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/faultnet"
	"github.com/pgoutbox/outbox/internal/listen"
	"github.com/pgoutbox/outbox/internal/produce"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/kafka"
	"github.com/pgoutbox/outbox/lease"
	"github.com/pgoutbox/outbox/notify"
	"github.com/pgoutbox/outbox/relay"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// harness is one relay (with its listener) on a test schema and topic.
type harness struct {
	t        *testing.T
	db       *testenv.TestDB
	kafka    *testenv.TestKafka
	topic    string
	relay    *relay.Relay
	claimer  *claim.Claimer
	listener *listen.Listener
	cancel   context.CancelFunc
	done     chan struct{}
}

type opts struct {
	relay    relay.Config
	lease    lease.Config
	noNotify bool
	kafkaCfg func(*kafka.Config)
	// wrapPublisher is ServiceConfig.WrapPublisher.
	wrapPublisher func(relay.Publisher) relay.Publisher
	// tracer is ServiceConfig.TracerProvider; log, if set, replaces the
	// test's logger.
	tracer trace.TracerProvider
	log    *zap.Logger
}

func startRelay(t *testing.T, db *testenv.TestDB, k *testenv.TestKafka, topic string, o opts) *harness {
	t.Helper()
	h := &harness{t: t, db: db, kafka: k, topic: topic, done: make(chan struct{})}
	cfg := relay.ServiceConfig{
		Relay: o.relay, Lease: o.lease, NoNotify: o.noNotify,
		Kafka: kafka.Config{Brokers: k.Brokers, WriteTimeout: 3 * time.Second},
		// The test's own channel: channels are per database, and parallel
		// tests share one. A ping slower than PingTimeout on a loaded
		// machine would make the listener reconnect and lose the
		// notifications tests count; no test here is about the watchdog.
		Notify: notify.Config{Channel: db.Schema, PingInterval: 500 * time.Millisecond, PingTimeout: 10 * time.Second},
	}
	cfg.Relay.Topic = topic
	cfg.TracerProvider = o.tracer
	cfg.WrapPublisher = o.wrapPublisher
	if o.kafkaCfg != nil {
		o.kafkaCfg(&cfg.Kafka)
	}
	log := o.log
	if log == nil {
		log = testenv.Logger(t)
	}
	svc, err := relay.NewService(db.Pool, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	h.relay, h.claimer, h.listener = svc.Relay(), svc.Claimer(), svc.Listener()
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() {
		_ = svc.Run(ctx)
		close(h.done)
	}()
	if h.listener != nil {
		// A relay start (table and privilege checks, LISTEN, its probe):
		// seconds on a loaded machine.
		testenv.Eventually(t, 60*time.Second, func() bool { return h.listener.State() == listen.StateListening }, "listener never connected")
	}
	t.Cleanup(h.stop)
	return h
}

// stop shuts the relay down gracefully and waits for it.
func (h *harness) stop() {
	h.cancel()
	select {
	case <-h.done:
	case <-time.After(30 * time.Second):
		h.t.Error("relay did not stop within 30s")
	}
}

func event(agg string, n int) outbox.Event {
	return outbox.Event{ID: outbox.NewID(), AggregateID: agg, Type: "test.event", Payload: json.RawMessage(fmt.Sprintf(`{"agg":%q,"n":%d}`, agg, n))}
}

func addTx(t *testing.T, db *testenv.TestDB, w *outbox.Writer, evs ...outbox.Event) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if w == nil {
		w = writer(t, db, outbox.WakeupDebounced)
	}
	if err := w.Add(ctx, tx, evs...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// writer returns a writer that notifies on the test's own channel.
func writer(t *testing.T, db *testenv.TestDB, mode outbox.WakeupMode) *outbox.Writer {
	w, err := outbox.NewWriter(outbox.WriterConfig{Wakeup: mode, Channel: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func unpublished(t *testing.T, db *testenv.TestDB) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox WHERE published_at IS NULL").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// firstAppearances returns event IDs in the order they first appear per
// aggregate, and how many records carried an ID already seen.
func firstAppearances(recs []testenv.Record) (map[string][]string, int) {
	seen := map[string]bool{}
	order := map[string][]string{}
	dups := 0
	for _, r := range recs {
		id := r.Headers["event_id"]
		if seen[id] {
			dups++
			continue
		}
		seen[id] = true
		order[string(r.Key)] = append(order[string(r.Key)], id)
	}
	return order, dups
}

// consumeUntil reads topic from its start until every event of ids has
// appeared (a duplicate, which at-least-once allows, does not count twice)
// and returns every record read. It fails the test after timeout.
func consumeUntil(t *testing.T, k *testenv.TestKafka, topic string, timeout time.Duration, ids ...string) []testenv.Record {
	t.Helper()
	c := k.Consumer(t, topic)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	missing := map[string]bool{}
	for _, id := range ids {
		missing[id] = true
	}
	var recs []testenv.Record
	for len(missing) > 0 {
		r, err := c.Next(ctx)
		if err != nil {
			t.Fatalf("after %s, %d records read, events %v not among them: %v", timeout, len(recs), missing, err)
		}
		recs = append(recs, r)
		delete(missing, r.Headers["event_id"])
	}
	return recs
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	db, k := testenv.MigratedDB(t), testenv.Kafka(t)
	topic := k.Topic(t, 3)
	startRelay(t, db, k, topic, opts{})
	evs := []outbox.Event{
		{ID: outbox.NewID(), AggregateID: "pay-1", Type: "payment.authorized", Payload: json.RawMessage(`{"amount":{"value":"12.50","currency":"EUR"},"note":"Grüße, 世界 🚀","tags":["a","b"],"nested":{"x":[1,{"y":null}]}}`), Headers: map[string]string{"tenant": "acme", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}},
		{ID: outbox.NewID(), AggregateID: "pay-1", Type: "payment.captured", Payload: json.RawMessage(`{"ok":true}`)},
		{ID: outbox.NewID(), AggregateID: "pay-2", Type: "payment.authorized", Payload: json.RawMessage(`[1,2.5,"three"]`)},
	}
	addTx(t, db, nil, evs...)
	recs := k.Consume(t, topic, len(evs), 15*time.Second)
	if len(recs) != len(evs) {
		t.Fatalf("consumed %d records, want %d", len(recs), len(evs))
	}
	byID := map[string]testenv.Record{}
	for _, r := range recs {
		byID[r.Headers["event_id"]] = r
	}
	for _, e := range evs {
		r, ok := byID[e.ID.String()]
		if !ok {
			t.Fatalf("event %s not on Kafka", e.ID)
		}
		if string(r.Key) != e.AggregateID || r.Headers["aggregate_id"] != e.AggregateID || r.Headers["event_type"] != e.Type {
			t.Errorf("record %s: key %q headers %v", e.ID, r.Key, r.Headers)
		}
		if want := produce.Partition([]byte(e.AggregateID), 3); int(r.Partition) != want {
			t.Errorf("record %s on partition %d, Java's murmur2 says %d", e.ID, r.Partition, want)
		}
		var got, want any
		if err := json.Unmarshal(r.Value, &got); err != nil {
			t.Fatalf("value %q: %v", r.Value, err)
		}
		_ = json.Unmarshal(e.Payload, &want)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("payload %s, want %s", r.Value, e.Payload)
		}
		for hk, hv := range e.Headers {
			if r.Headers[hk] != hv {
				t.Errorf("header %s = %q, want %q", hk, r.Headers[hk], hv)
			}
		}
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return unpublished(t, db) == 0 }, "rows not marked published")
}

func TestRollbackPublishesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, k := testenv.MigratedDB(t), testenv.Kafka(t)
	topic := k.Topic(t, 1)
	startRelay(t, db, k, topic, opts{})
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	phantom := event("acct-1", 1)
	if err := outbox.Add(ctx, tx, phantom); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// A later committed event on the same single partition: once it is on
	// Kafka, anything before it would be too.
	sentinel := event("acct-1", 2)
	addTx(t, db, nil, sentinel)
	recs := k.Consume(t, topic, 1, 15*time.Second)
	if len(recs) != 1 || recs[0].Headers["event_id"] != sentinel.ID.String() {
		t.Fatalf("records %v, want only the sentinel %s", recs, sentinel.ID)
	}
}

func TestNotificationWakesRelayWithoutPolling(t *testing.T) {
	t.Parallel()
	db, k := testenv.MigratedDB(t), testenv.Kafka(t)
	topic := k.Topic(t, 1)
	h := startRelay(t, db, k, topic, opts{relay: relay.Config{PollInterval: time.Minute}})
	c := k.Consumer(t, topic)
	// Let the start-up claim happen, so only a notification can wake it.
	testenv.Eventually(t, 10*time.Second, func() bool { return h.relay.Stats().Claims >= 1 }, "no start-up claim")
	ev := event("a", 1)
	start := time.Now()
	addTx(t, db, writer(t, db, outbox.WakeupEveryTx), ev)
	// Only a hang guard, under the 1m poll interval: WakePoll == 0 below
	// proves that the notification, not the poll, published the event.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := c.Next(ctx)
	if err != nil {
		t.Fatalf("event not published within 30s with a 1m poll interval: %v", err)
	}
	if r.Headers["event_id"] != ev.ID.String() {
		t.Fatalf("got %v", r.Headers)
	}
	st := h.relay.Stats()
	if st.WakeNotify < 1 || st.WakePoll != 0 {
		t.Fatalf("stats %+v: want a notification wake-up and no poll", st)
	}
	t.Logf("commit-to-consume %s", time.Since(start))
}

func TestLostNotificationFallsBackToPollingAndListenerReconnects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, k := testenv.MigratedDB(t), testenv.Kafka(t)
	topic := k.Topic(t, 1)
	h := startRelay(t, db, k, topic, opts{relay: relay.Config{PollInterval: 300 * time.Millisecond}})
	c := k.Consumer(t, topic)

	var pid uint32
	if err := db.Pool.QueryRow(ctx, "SELECT pid FROM pg_stat_activity WHERE query = 'listen \"' || $1 || '\"'", db.Schema).Scan(&pid); err != nil {
		t.Fatalf("find listener backend: %v", err)
	}
	if _, err := db.Pool.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatal(err)
	}
	// An event with no wake-up at all, while the listener is down or back:
	// the poll ticker must publish it.
	polled := event("a", 1)
	addTx(t, db, writer(t, db, outbox.WakeupNone), polled)
	// One hang guard for both reads, and the reconnect wait between them.
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if r, err := c.Next(rctx); err != nil || r.Headers["event_id"] != polled.ID.String() {
		t.Fatalf("polled event: %v %v", r.Headers, err)
	}
	testenv.Eventually(t, 15*time.Second, func() bool {
		return h.listener.Reconnects() >= 2 && h.listener.State() == listen.StateListening
	}, "listener did not reconnect (reconnects=%d)", h.listener.Reconnects())
	before := h.listener.Notifications()
	notified := event("a", 2)
	addTx(t, db, writer(t, db, outbox.WakeupEveryTx), notified)
	if r, err := c.Next(rctx); err != nil || r.Headers["event_id"] != notified.ID.String() {
		t.Fatalf("notified event: %v %v", r.Headers, err)
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return h.listener.Notifications() > before }, "no notification arrived after reconnect")
}

func TestCommitOrderDiffersFromInsertOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, k := testenv.MigratedDB(t), testenv.Kafka(t)
	topic := k.Topic(t, 2)
	startRelay(t, db, k, topic, opts{})
	c := k.Consumer(t, topic)
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()

	t1, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer t1.Rollback(ctx) //nolint:errcheck
	e1 := event("a", 1)    // lower seq, commits last
	if err := outbox.Add(ctx, t1, e1); err != nil {
		t.Fatal(err)
	}
	e2 := event("b", 1)
	addTx(t, db, nil, e2)
	if r, err := c.Next(rctx); err != nil || r.Headers["event_id"] != e2.ID.String() {
		t.Fatalf("T2's event: %v %v", r.Headers, err)
	}
	if err := t1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Next(rctx); err != nil || r.Headers["event_id"] != e1.ID.String() {
		t.Fatalf("T1's event (lower seq, committed later) was skipped: %v %v", r.Headers, err)
	}
}

func TestThousandEventsInOneTransactionKeepAggregateOrder(t *testing.T) {
	t.Parallel()
	db, k := testenv.MigratedDB(t), testenv.Kafka(t)
	topic := k.Topic(t, 4)
	startRelay(t, db, k, topic, opts{lease: lease.Config{BatchSize: 128}})
	var evs []outbox.Event
	want := map[string][]string{}
	for i := 0; i < 1000; i++ {
		agg := fmt.Sprintf("agg-%02d", i%50)
		e := event(agg, i)
		evs = append(evs, e)
		want[agg] = append(want[agg], e.ID.String())
	}
	addTx(t, db, nil, evs...)
	recs := k.Consume(t, topic, 1000, 30*time.Second)
	got, _ := firstAppearances(recs)
	if len(got) != 50 {
		t.Fatalf("%d aggregates on Kafka, want 50 (%d records)", len(got), len(recs))
	}
	for agg, ids := range want {
		if fmt.Sprint(got[agg]) != fmt.Sprint(ids) {
			t.Fatalf("aggregate %s: order on Kafka %v, want %v", agg, got[agg], ids)
		}
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return unpublished(t, db) == 0 }, "rows not marked")
}

func TestTwoRelaysPublishEveryEventOnce(t *testing.T) {
	t.Parallel()
	db, k := testenv.MigratedDB(t), testenv.Kafka(t)
	topic := k.Topic(t, 4)
	r1 := startRelay(t, db, k, topic, opts{lease: lease.Config{BatchSize: 20, RelayID: "r1"}})
	r2 := startRelay(t, db, k, topic, opts{lease: lease.Config{BatchSize: 20, RelayID: "r2"}})
	want := map[string][]string{}
	total := 0
	for tx := 0; tx < 50; tx++ {
		var evs []outbox.Event
		for i := 0; i < 10; i++ {
			agg := fmt.Sprintf("agg-%d", (tx*10+i)%37)
			e := event(agg, tx*10+i)
			evs = append(evs, e)
			want[agg] = append(want[agg], e.ID.String())
		}
		addTx(t, db, nil, evs...)
		total += len(evs)
	}
	testenv.Eventually(t, 30*time.Second, func() bool { return unpublished(t, db) == 0 }, "not all rows published")
	recs := k.Consume(t, topic, total, 15*time.Second)
	got, dups := firstAppearances(recs)
	if dups != 0 || len(recs) != total {
		t.Fatalf("%d records for %d events, %d duplicates; want each once", len(recs), total, dups)
	}
	for agg, ids := range want {
		if fmt.Sprint(got[agg]) != fmt.Sprint(ids) {
			t.Fatalf("aggregate %s out of order: %v, want %v", agg, got[agg], ids)
		}
	}
	s1, s2 := r1.relay.Stats(), r2.relay.Stats()
	if s1.Published+s2.Published != int64(total) {
		t.Fatalf("published %d + %d, want %d", s1.Published, s2.Published, total)
	}
	t.Logf("r1 published %d, r2 %d", s1.Published, s2.Published)
}

func TestStalledRelayLosesLeaseAndCannotClobber(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, k := testenv.MigratedDB(t), testenv.Kafka(t)
	topic := k.Topic(t, 1)
	evs := []outbox.Event{event("a", 1), event("a", 2), event("b", 1)}
	addTx(t, db, nil, evs...)
	// The stalled relay: it claimed with a 1s lease and then hangs.
	stalled, err := claim.New(db.Pool, lease.Config{RelayID: "stalled", Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	b, err := stalled.Claim(ctx)
	if err != nil || len(b.Rows) != 3 {
		t.Fatalf("stalled claim: %v, %d rows", err, len(b.Rows))
	}
	startRelay(t, db, k, topic, opts{relay: relay.Config{PollInterval: 100 * time.Millisecond}, lease: lease.Config{RelayID: "healthy"}})
	recs := k.Consume(t, topic, 3, 20*time.Second)
	got, _ := firstAppearances(recs)
	if fmt.Sprint(got["a"]) != fmt.Sprint([]string{evs[0].ID.String(), evs[1].ID.String()}) || len(got["b"]) != 1 {
		t.Fatalf("after lease expiry the healthy relay published %v", got)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return unpublished(t, db) == 0 }, "not marked")
	// The stalled relay wakes up: its mark and release change nothing.
	seqs := []int64{b.Rows[0].Seq, b.Rows[1].Seq, b.Rows[2].Seq}
	if n, err := stalled.MarkPublished(ctx, b.Token, seqs); err != nil || n != 0 {
		t.Fatalf("late mark: %d %v", n, err)
	}
	if n, err := stalled.Release(ctx, claim.Settle{Token: b.Token, Seqs: seqs, CountAttempt: true, LastError: "late"}); err != nil || n != 0 {
		t.Fatalf("late release: %d %v", n, err)
	}
	var lockedBy string
	if err := db.Pool.QueryRow(ctx, "SELECT string_agg(DISTINCT coalesce(locked_by, '-'), ',') FROM outbox").Scan(&lockedBy); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(lockedBy, "healthy/") || strings.Contains(lockedBy, ",") {
		t.Fatalf("locked_by after publish = %q, want the healthy relay's claim kept", lockedBy)
	}
}

func TestBrokerDownMarksNothingThenDeliversEverything(t *testing.T) {
	t.Parallel()
	db := testenv.MigratedDB(t)
	ln, err := faultnet.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	k := testenv.KafkaFake(t, kfake.ListenFn(func(network, addr string) (net.Listener, error) { return ln, nil }))
	topic := k.Topic(t, 2)
	h := startRelay(t, db, k, topic, opts{
		relay:    relay.Config{PollInterval: 100 * time.Millisecond, RetryMin: 100 * time.Millisecond, RetryMax: 500 * time.Millisecond},
		kafkaCfg: func(c *kafka.Config) { c.WriteTimeout = time.Second; c.MaxAttempts = 1 },
	})
	ln.SetMode(faultnet.Refuse)
	var evs []outbox.Event
	for i := 0; i < 20; i++ {
		evs = append(evs, event(fmt.Sprint("agg-", i%5), i))
	}
	addTx(t, db, nil, evs...)
	testenv.Eventually(t, 20*time.Second, func() bool {
		var n int
		_ = db.Pool.QueryRow(context.Background(), "SELECT count(last_error) FROM outbox").Scan(&n)
		return h.relay.Stats().Failed >= 1 && n > 0
	}, "no failed publish recorded while the broker is down")
	if n := unpublished(t, db); n != len(evs) {
		t.Fatalf("%d rows unpublished while the broker is down, want %d: something was marked", n, len(evs))
	}
	// An unreachable broker is an outage, not a poison event: the error
	// is recorded, but no attempt counts toward dead-lettering.
	var attempts, withError int
	if err := db.Pool.QueryRow(context.Background(), "SELECT max(attempts), count(last_error) FROM outbox").Scan(&attempts, &withError); err != nil {
		t.Fatal(err)
	}
	if attempts != 0 || withError == 0 {
		t.Fatalf("max attempts %d, rows with last_error %d; want 0 attempts counted and the error recorded", attempts, withError)
	}
	ln.SetMode(faultnet.Up)
	testenv.Eventually(t, 30*time.Second, func() bool { return unpublished(t, db) == 0 }, "not delivered after the broker came back")
	recs := k.Consume(t, topic, len(evs), 15*time.Second)
	got, _ := firstAppearances(recs)
	n := 0
	for _, ids := range got {
		n += len(ids)
	}
	if n != len(evs) {
		t.Fatalf("%d distinct events on Kafka, want %d", n, len(evs))
	}
}

func TestGracefulShutdownReleasesLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	ln, err := faultnet.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	k := testenv.KafkaFake(t, kfake.ListenFn(func(network, addr string) (net.Listener, error) { return ln, nil }))
	topic := k.Topic(t, 1)
	// Relay A holds a 10-minute lease on everything, with a stalled broker.
	const shutdownTimeout = 500 * time.Millisecond
	a := startRelay(t, db, k, topic, opts{
		lease:    lease.Config{RelayID: "a", Lease: 10 * time.Minute, BatchSize: 50},
		relay:    relay.Config{ShutdownTimeout: shutdownTimeout},
		kafkaCfg: func(c *kafka.Config) { c.WriteTimeout = time.Minute },
	})
	ln.SetMode(faultnet.Blackhole)
	var evs []outbox.Event
	for i := 0; i < 100; i++ {
		evs = append(evs, event(fmt.Sprint("agg-", i%7), i))
	}
	addTx(t, db, nil, evs...)
	testenv.Eventually(t, 10*time.Second, func() bool {
		var n int
		_ = db.Pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE locked_by LIKE 'a/%'").Scan(&n)
		return n > 0
	}, "relay a never claimed")
	stopped := time.Now()
	a.stop()
	// The documented bound (README, docs/operating.md): a stopping relay
	// is done within --shutdown-timeout plus 1.5 s, whatever the broker
	// does.
	if d, bound := time.Since(stopped), shutdownTimeout+1500*time.Millisecond; d > bound {
		t.Fatalf("Service.Run returned %s after its context was cancelled, want at most %s (ShutdownTimeout %s plus 1.5 s)", d, bound, shutdownTimeout)
	}
	var held int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE published_at IS NULL AND locked_until > now()").Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held != 0 {
		var info string
		_ = db.Pool.QueryRow(ctx, "SELECT string_agg(DISTINCT locked_by || ' ' || claim_token::text || ' ' || attempts, '; ') FROM outbox WHERE published_at IS NULL AND locked_until > now()").Scan(&info)
		t.Fatalf("%d rows still leased after a graceful stop: %s; stats %+v", held, info, a.relay.Stats())
	}
	ln.SetMode(faultnet.Up)
	// Relay B publishes the rest at once, long before A's 10-minute lease.
	startRelay(t, db, k, topic, opts{lease: lease.Config{RelayID: "b"}})
	testenv.Eventually(t, 20*time.Second, func() bool { return unpublished(t, db) == 0 }, "relay b did not take over the released rows")
}

// With the writer's default debounced wake-ups, only the first of several
// quick transactions notifies; lingering claims must find the others long
// before the (here one-minute) poll.
func TestDebouncedWakeupsAreCoveredByLingering(t *testing.T) {
	t.Parallel()
	db, k := testenv.MigratedDB(t), testenv.Kafka(t)
	topic := k.Topic(t, 1)
	// A long linger window, so a slow machine cannot make the test flaky;
	// the default (25ms) only has to cover the writer's 20ms window.
	h := startRelay(t, db, k, topic, opts{relay: relay.Config{PollInterval: time.Minute, ClaimWindow: 5 * time.Second}})
	testenv.Eventually(t, 10*time.Second, func() bool { return h.relay.Stats().Claims >= 1 }, "no start-up claim")
	listenerBefore := h.listener.Notifications()
	w, err := outbox.NewWriter(outbox.WriterConfig{Wakeup: outbox.WakeupDebounced, WakeupInterval: time.Hour, Channel: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	var evs []outbox.Event
	for i := 0; i < 5; i++ {
		e := event("a", i)
		evs = append(evs, e)
		addTx(t, db, w, e) // only the first carries a notification
	}
	// Only a hang guard, under the 1m poll interval: WakePoll == 0 below
	// proves that no poll found them.
	recs := k.Consume(t, topic, 5, 30*time.Second)
	if len(recs) != 5 {
		t.Fatalf("%d of 5 debounced events published within 30s (poll interval 1m)", len(recs))
	}
	for i, r := range recs {
		if r.Headers["event_id"] != evs[i].ID.String() {
			t.Fatalf("record %d is %s, want %s", i, r.Headers["event_id"], evs[i].ID)
		}
	}
	if n := h.listener.Notifications() - listenerBefore; n != 1 {
		t.Fatalf("%d notifications for 5 debounced transactions, want 1", n)
	}
	if st := h.relay.Stats(); st.WakePoll != 0 {
		t.Fatalf("stats %+v: a poll was needed", st)
	}
}
