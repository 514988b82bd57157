package metrics_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/listen"
	"github.com/pgoutbox/outbox/internal/metrics"
	"github.com/pgoutbox/outbox/internal/produce"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/kafka"
	"github.com/pgoutbox/outbox/relay"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// scrape GETs url and returns every sample of the text format keyed by
// its series as printed, e.g. `outbox_relay_wakeups_total{cause="poll"}`.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("bad sample line %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

func want(t *testing.T, got map[string]float64, series string, value float64) {
	t.Helper()
	v, ok := got[series]
	if !ok {
		t.Errorf("%s missing", series)
	} else if v != value {
		t.Errorf("%s = %v, want %v", series, v, value)
	}
}

func TestTableGaugesAreComputedFromTheTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	// No relay runs: 3 unpublished rows inserted 2s ago (created_at is the
	// inserting transaction's start), 2 published, 1 dead letter even older
	// (not counted in the age: it waits for requeue, not for the relay).
	_, err := db.Pool.Exec(ctx, `
INSERT INTO outbox (id, aggregate_id, event_type, payload, created_at)
SELECT gen_random_uuid(), 'a' || i, 't', '{}', now() - interval '2 seconds' FROM generate_series(1, 3) i;
INSERT INTO outbox (id, aggregate_id, event_type, payload, created_at, published_at)
SELECT gen_random_uuid(), 'p' || i, 't', '{}', now() - interval '1 hour', now() - interval '59 minutes' FROM generate_series(1, 2) i;
INSERT INTO outbox (id, aggregate_id, event_type, payload, created_at, dead_lettered_at, attempts, last_error)
VALUES (gen_random_uuid(), 'd', 't', '{}', now() - interval '10 minutes', now(), 16, 'boom');`)
	if err != nil {
		t.Fatal(err)
	}
	m, err := metrics.New(metrics.Config{}, db.Pool, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()

	// Before the first refresh the gauges are 0.
	got := scrape(t, srv.URL+"/metrics")
	want(t, got, "outbox_unpublished_events", 0)

	s, err := m.Refresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Unpublished != 3 || s.DeadLetters != 1 || s.OldestUnpublishedAge < 2*time.Second || s.OldestUnpublishedAge > time.Minute {
		t.Fatalf("stats %+v; want 3 unpublished, 1 dead letter, age 2s..1m", s)
	}
	got = scrape(t, srv.URL+"/metrics")
	want(t, got, "outbox_unpublished_events", 3)
	want(t, got, "outbox_dead_letter_events", 1)
	if age := got["outbox_oldest_unpublished_age_seconds"]; age < 2 || age > 60 {
		t.Errorf("outbox_oldest_unpublished_age_seconds = %v, want 2..60", age)
	}
	if age := got["outbox_oldest_claimable_age_seconds"]; age < 2 || age > 60 {
		t.Errorf("outbox_oldest_claimable_age_seconds = %v, want 2..60", age)
	}
	if ts := got["outbox_oldest_unpublished_created_timestamp_seconds"]; ts < float64(time.Now().Add(-time.Minute).Unix()) || ts > float64(time.Now().Unix()) {
		t.Errorf("outbox_oldest_unpublished_created_timestamp_seconds = %v, want about 2s ago", ts)
	}
	if got["outbox_table_stats_last_success_timestamp_seconds"] < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Errorf("last success timestamp not set: %v", got["outbox_table_stats_last_success_timestamp_seconds"])
	}
	want(t, got, "outbox_relay_up", 0)

	// Everything published: age 0 (not the dead letter's age), count 0.
	if _, err := db.Pool.Exec(ctx, "UPDATE outbox SET published_at = now() WHERE dead_lettered_at IS NULL"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	got = scrape(t, srv.URL+"/metrics")
	want(t, got, "outbox_unpublished_events", 0)
	want(t, got, "outbox_oldest_unpublished_age_seconds", 0)
	want(t, got, "outbox_dead_letter_events", 1)

	// A failing refresh keeps the values and counts the error.
	if _, err := db.Pool.Exec(ctx, "ALTER TABLE outbox RENAME TO outbox_gone"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Refresh(ctx); err == nil {
		t.Fatal("refresh on a missing table succeeded")
	}
	got = scrape(t, srv.URL+"/metrics")
	want(t, got, "outbox_table_stats_errors_total", 1)
	want(t, got, "outbox_dead_letter_events", 1)
}

// TestStatsQueryUsesThePartialIndexes checks with EXPLAIN that the table
// gauges never scan the published history.
func TestStatsQueryUsesThePartialIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	_, err := db.Pool.Exec(ctx, `
INSERT INTO outbox (id, aggregate_id, event_type, payload, published_at)
SELECT gen_random_uuid(), 'p' || (i % 100), 't', '{}', now() FROM generate_series(1, 50000) i;
INSERT INTO outbox (id, aggregate_id, event_type, payload)
SELECT gen_random_uuid(), 'u' || i, 't', '{}' FROM generate_series(1, 20) i;
UPDATE outbox SET dead_lettered_at = now() WHERE aggregate_id IN ('u1', 'u2');
ANALYZE outbox;`)
	if err != nil {
		t.Fatal(err)
	}
	m, err := metrics.New(metrics.Config{}, db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := db.Pool.Query(ctx, "EXPLAIN "+m.StatsSQL())
	if err != nil {
		t.Fatal(err)
	}
	var plan strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(line + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	p := plan.String()
	if !strings.Contains(p, "Index Scan using outbox_unpublished_seq_idx") || !strings.Contains(p, "outbox_dead_letters_idx") || strings.Contains(p, "Seq Scan") {
		t.Fatalf("the stats query does not use the partial indexes:\n%s", p)
	}
	s, err := m.Refresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Unpublished != 18 || s.DeadLetters != 2 {
		t.Fatalf("stats %+v, want 18 unpublished, 2 dead letters", s)
	}
}

// fakeRelay stands in for the relay, the dependency whose counters and
// health metrics exports (the relay's own Health is tested in package
// relay and by the fault suite).
type fakeRelay struct {
	s relay.Stats
	h *relay.Health
}

func (f *fakeRelay) Stats() relay.Stats { return f.s }
func (f *fakeRelay) Health() relay.Health {
	if f.h == nil {
		return relay.Health{Moving: true}
	}
	return *f.h
}

type fakeListener struct{ state atomic.Int32 }

func (f *fakeListener) State() listen.State  { return listen.State(f.state.Load()) }
func (f *fakeListener) Notifications() int64 { return 42 }
func (f *fakeListener) Ignored() int64       { return 7 }
func (f *fakeListener) Reconnects() int64    { return 3 }

func TestRelayCountersPublishedByTopicAndLatency(t *testing.T) {
	t.Parallel()
	db := testenv.MigratedDB(t)
	m, err := metrics.New(metrics.Config{DefaultTopic: "payments"}, db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	l := &fakeListener{}
	l.state.Store(int32(listen.StateListening))
	m.Attach(metrics.Components{
		Relay: &fakeRelay{s: relay.Stats{Claims: 10, EmptyClaims: 4, Published: 5, Marked: 5, Failed: 2, HeldBack: 1, Released: 3, DeadLettered: 1,
			WakeNotify: 6, WakePoll: 2, WakeWindow: 1, WakeBacklog: 1}},
		Listener: l,
	})
	// 1.1 s ago: in the (1.024, 2.048] bucket unless this goroutine
	// stalls for 0.9 s before Published reads the clock.
	created := time.Now().Add(-1100 * time.Millisecond)
	m.Published([]claim.Row{{CreatedAt: created}, {CreatedAt: created}, {Topic: "refunds", CreatedAt: created}, {CreatedAt: created}})
	m.Published([]claim.Row{{Topic: "refunds", CreatedAt: time.Now()}})
	m.Published(nil)
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	got := scrape(t, srv.URL+"/metrics")
	for series, v := range map[string]float64{
		`outbox_relay_up`:                                   1,
		`outbox_relay_marked_total`:                         5,
		`outbox_relay_publish_failures_total`:               2,
		`outbox_relay_dead_lettered_total`:                  1,
		`outbox_relay_held_back_total`:                      1,
		`outbox_relay_released_total`:                       3,
		`outbox_relay_claims_total`:                         10,
		`outbox_relay_empty_claims_total`:                   4,
		`outbox_relay_wakeups_total{cause="notify"}`:        6,
		`outbox_relay_wakeups_total{cause="poll"}`:          2,
		`outbox_relay_wakeups_total{cause="window"}`:        1,
		`outbox_relay_wakeups_total{cause="backlog"}`:       1,
		`outbox_listener_connected`:                         1,
		`outbox_notifications_received_total`:               42,
		`outbox_notifications_ignored_total`:                7,
		`outbox_listener_reconnects_total`:                  3,
		`outbox_published_events_total{topic="payments"}`:   3,
		`outbox_published_events_total{topic="refunds"}`:    2,
		`outbox_publish_latency_seconds_count`:              5,
		`outbox_publish_latency_seconds_bucket{le="1.024"}`: 1,
		`outbox_publish_latency_seconds_bucket{le="2.048"}`: 5,
	} {
		want(t, got, series, v)
	}
	if sum := got["outbox_publish_latency_seconds_sum"]; sum < 4*1.1 || sum > 4*1.1+5 {
		t.Errorf("latency sum %v, want about 4.4", sum)
	}

	// Listener disconnected: 0. Poll-only: no listener metrics at all.
	l.state.Store(int32(listen.StateConnecting))
	want(t, scrape(t, srv.URL+"/metrics"), "outbox_listener_connected", 0)
	m.Attach(metrics.Components{Relay: &fakeRelay{}})
	if _, ok := scrape(t, srv.URL+"/metrics")["outbox_listener_connected"]; ok {
		t.Error("poll-only relay exports outbox_listener_connected")
	}
}

type readyz struct {
	code int
	body metrics.Readiness
}

func getReady(t *testing.T, url string) readyz {
	t.Helper()
	resp, err := http.Get(url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r readyz
	r.code = resp.StatusCode
	if err := json.Unmarshal(b, &r.body); err != nil {
		t.Fatalf("readyz body %q: %v", b, err)
	}
	return r
}

func TestReadiness(t *testing.T) {
	t.Parallel()
	db := testenv.MigratedDB(t)
	k := testenv.KafkaFake(t)
	pub, err := produce.NewPublisher(kafka.Config{Brokers: k.Brokers, Topic: "t"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	m, err := metrics.New(metrics.Config{ReadyCacheTTL: -1}, db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	resp.Body.Close()

	// Not attached yet (the relay waits for the database and the broker).
	r := getReady(t, srv.URL)
	if r.code != 503 || strings.Join(r.body.Failed, ",") != "relay" || !r.body.Checks["database"].OK {
		t.Fatalf("before attach: %d %+v", r.code, r.body)
	}

	// Poll-only, everything up.
	m.Attach(metrics.Components{Relay: &fakeRelay{}, Broker: pub})
	r = getReady(t, srv.URL)
	if r.code != 200 || !r.body.Ready || len(r.body.Failed) != 0 || r.body.Checks["listener"].Detail != "poll-only (--no-notify)" {
		t.Fatalf("poll-only, all up: %d %+v", r.code, r.body)
	}

	// A listener that is not listening.
	l := &fakeListener{}
	m.Attach(metrics.Components{Relay: &fakeRelay{}, Broker: pub, Listener: l})
	r = getReady(t, srv.URL)
	if r.code != 503 || strings.Join(r.body.Failed, ",") != "listener" || !strings.Contains(r.body.Checks["listener"].Detail, "connecting") {
		t.Fatalf("listener connecting: %d %+v", r.code, r.body)
	}
	l.state.Store(int32(listen.StateListening))
	if r = getReady(t, srv.URL); r.code != 200 {
		t.Fatalf("listener listening: %d %+v", r.code, r.body)
	}

	// The broker goes away.
	k.Cluster.Close()
	r = getReady(t, srv.URL)
	if r.code != 503 || strings.Join(r.body.Failed, ",") != "broker" || r.body.Checks["broker"].Detail == "" {
		t.Fatalf("broker down: %d %+v", r.code, r.body)
	}

	// Stopping.
	m.SetStopping()
	if r = getReady(t, srv.URL); r.code != 503 || !strings.Contains(strings.Join(r.body.Failed, ","), "stopping") {
		t.Fatalf("stopping: %d %+v", r.code, r.body)
	}
}

func TestReadinessIsCached(t *testing.T) {
	t.Parallel()
	db := testenv.MigratedDB(t)
	var pings atomic.Int64
	m, err := metrics.New(metrics.Config{ReadyCacheTTL: time.Hour}, db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.Attach(metrics.Components{Relay: &fakeRelay{}, Broker: pingFunc(func(context.Context) error { pings.Add(1); return nil })})
	for range 5 {
		if r := m.Ready(context.Background()); !r.Ready {
			t.Fatalf("not ready: %+v", r)
		}
	}
	if n := pings.Load(); n != 1 {
		t.Fatalf("broker pinged %d times within the cache TTL, want 1", n)
	}
}

func TestReadinessChecksAreBounded(t *testing.T) {
	t.Parallel()
	db := testenv.MigratedDB(t)
	m, err := metrics.New(metrics.Config{CheckTimeout: 200 * time.Millisecond}, db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.Attach(metrics.Components{Relay: &fakeRelay{}, Broker: pingFunc(func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })})
	start := time.Now()
	r := m.Ready(context.Background())
	if r.Ready || strings.Join(r.Failed, ",") != "broker" || time.Since(start) > 5*time.Second {
		t.Fatalf("hanging broker: %+v after %s", r, time.Since(start))
	}
}

type pingFunc func(context.Context) error

func (f pingFunc) Ping(ctx context.Context) error { return f(ctx) }

func TestConfigValidateNamesTheField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  metrics.Config
		want string
	}{
		{metrics.Config{Interval: time.Millisecond}, "Config.Interval"},
		{metrics.Config{Table: "a.b.c"}, "Config.Table"},
		{metrics.Config{QueryTimeout: -1}, "Config.QueryTimeout"},
		{metrics.Config{CheckTimeout: -1}, "Config.CheckTimeout"},
	} {
		if err := tc.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
	c := metrics.Config{}
	d := c.WithDefaults()
	if err := c.Validate(); err != nil || d.Interval != 5*time.Second || d.Table != "outbox" || d.ReadyCacheTTL != 2*time.Second {
		t.Errorf("defaults: %+v %v", d, err)
	}
	if c.Interval != 0 {
		t.Errorf("Validate changed the config: %+v", c)
	}
}

// The age gauges are computed when scraped, not when the table was last
// read: with no refresh in between, an event's age keeps growing (before,
// it was a snapshot frozen for --metrics-interval: 0.015s four seconds
// after the events were written).
func TestOldestAgeGrowsBetweenRefreshes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload) SELECT gen_random_uuid(), 'a' || i, 't', '{}' FROM generate_series(1, 20) i`); err != nil {
		t.Fatal(err)
	}
	m, err := metrics.New(metrics.Config{Interval: time.Hour}, db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	first := scrape(t, srv.URL+"/metrics")["outbox_oldest_unpublished_age_seconds"]
	created := scrape(t, srv.URL+"/metrics")["outbox_oldest_unpublished_created_timestamp_seconds"]
	var later float64
	testenv.Eventually(t, 10*time.Second, func() bool {
		later = scrape(t, srv.URL+"/metrics")["outbox_oldest_unpublished_age_seconds"]
		return later >= first+1.5
	}, "age stayed at %.3fs after the only refresh (want it to grow as scrapes go on)", later)
	if now := scrape(t, srv.URL+"/metrics")["outbox_oldest_unpublished_created_timestamp_seconds"]; now != created {
		t.Errorf("created timestamp changed without a refresh: %v -> %v", created, now)
	}
	t.Logf("age %.3fs at the refresh, %.3fs on a later scrape, no refresh in between", first, later)
}

// Readiness is "events are moving": a stalled relay fails the relay check,
// naming the step and the error, and says it moves again once it does;
// with ReadyMaxAge, an old claimable event fails the backlog check.
func TestReadinessFollowsRelayHealthAndBacklogAge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	m, err := metrics.New(metrics.Config{ReadyCacheTTL: -1, ReadyMaxAge: time.Minute}, db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	fr := &fakeRelay{}
	m.Attach(metrics.Components{Relay: fr, Broker: pingFunc(func(context.Context) error { return nil })})
	if _, err := m.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if r := getReady(t, srv.URL); r.code != 200 || r.body.Checks["relay"].Detail != "moving events" {
		t.Fatalf("healthy: %d %+v", r.code, r.body)
	}
	fr.h = &relay.Health{Moving: false, Step: "claim", Since: time.Now().Add(-40 * time.Second), ClaimFailures: 12,
		Reason: "12 claims failed in a row for 40s: last error: ERROR: cannot execute UPDATE in a read-only transaction (SQLSTATE 25006)"}
	r := getReady(t, srv.URL)
	if r.code != 503 || strings.Join(r.body.Failed, ",") != "relay" || !strings.Contains(r.body.Checks["relay"].Detail, "claim: 12 claims failed") ||
		!strings.Contains(r.body.Checks["relay"].Detail, "25006") {
		t.Fatalf("stalled: %d %+v", r.code, r.body)
	}
	got := scrape(t, srv.URL+"/metrics")
	want(t, got, `outbox_relay_stalled{step="claim"}`, 1)
	want(t, got, `outbox_relay_consecutive_failures{step="claim"}`, 12)
	fr.h = nil
	if r := getReady(t, srv.URL); r.code != 200 {
		t.Fatalf("moving again: %d %+v", r.code, r.body)
	}
	want(t, scrape(t, srv.URL+"/metrics"), `outbox_relay_stalled{step=""}`, 0)

	// An event claimable for two minutes: not ready. One leased by a relay
	// is not claimable, nor one held behind an earlier event backing off;
	// one behind an earlier event a relay leased is: the relay that owns
	// the aggregate claims it next.
	if _, err := db.Pool.Exec(ctx, `
INSERT INTO outbox (id, aggregate_id, event_type, payload, created_at, locked_until, locked_by)
VALUES (gen_random_uuid(), 'leased', 't', '{}', now() - interval '5 minutes', now() + interval '1 minute', 'other');
INSERT INTO outbox (id, aggregate_id, event_type, payload, created_at, locked_until)
VALUES (gen_random_uuid(), 'backoff', 't', '{}', now() - interval '5 minutes', now() + interval '1 minute');
INSERT INTO outbox (id, aggregate_id, event_type, payload, created_at)
VALUES (gen_random_uuid(), 'backoff', 't', '{}', now() - interval '4 minutes');`); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if r := getReady(t, srv.URL); r.code != 200 {
		t.Fatalf("only leased or held-back events: %d %+v", r.code, r.body)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload, created_at)
VALUES (gen_random_uuid(), 'leased', 't', '{}', now() - interval '2 minutes')`); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	r = getReady(t, srv.URL)
	if r.code != 503 || strings.Join(r.body.Failed, ",") != "backlog" || !strings.Contains(r.body.Checks["backlog"].Detail, "over 1m0s") {
		t.Fatalf("claimable event 2 minutes old: %d %+v", r.code, r.body)
	}
}

// With ReadyMaxAge, table stats that have failed since the start leave the
// oldest claimable age unknown: the backlog check fails saying so, rather
// than being left out (which read as ready while events could be stuck).
func TestReadinessBacklogUnknownWhileTheStatsFail(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := testenv.MigratedDB(t)
	// Every refresh times out at once.
	m, err := metrics.New(metrics.Config{ReadyCacheTTL: -1, ReadyMaxAge: time.Minute, QueryTimeout: time.Nanosecond, Interval: 100 * time.Millisecond}, db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	m.Attach(metrics.Components{Relay: &fakeRelay{}, Broker: pingFunc(func(context.Context) error { return nil })})
	done := make(chan error, 1)
	go func() { done <- m.RunRefresher(ctx) }()
	var r readyz
	testenv.Eventually(t, 10*time.Second, func() bool {
		r = getReady(t, srv.URL)
		return r.code == 503 && strings.Join(r.body.Failed, ",") == "backlog"
	}, "the backlog check fails while the stats fail")
	if d := r.body.Checks["backlog"].Detail; !strings.Contains(d, "unknown") || !strings.Contains(d, "table stats failed") {
		t.Errorf("backlog detail %q", d)
	}
	cancel()
	<-done
}

// A session holding an old snapshot is found and named, its age exported,
// and a warning logged once (the database is shared with the other tests:
// the oldest holder may be another test's, at least as old as ours).
func TestOldestSnapshotHolderIsNamed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ"); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, "ROLLBACK") //nolint:errcheck
	if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	core, logs := observer.New(zapcore.WarnLevel)
	m, err := metrics.New(metrics.Config{SnapshotWarnAfter: 200 * time.Millisecond}, db.Pool, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	var h *metrics.SnapshotHolder
	testenv.Eventually(t, 10*time.Second, func() bool {
		h, err = m.OldestSnapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return h != nil && h.Age >= 300*time.Millisecond && time.Since(began) >= 300*time.Millisecond
	}, "no snapshot holder older than 300ms found: %+v", h)
	if _, err := m.OldestSnapshot(ctx); err != nil { // a second call: no second warning
		t.Fatal(err)
	}
	if n := logs.FilterMessageSnippet("holds an old snapshot").Len(); n != 1 {
		t.Errorf("%d warnings, want 1 (at most one per 5 minutes)", n)
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	if age := scrape(t, srv.URL+"/metrics")["outbox_oldest_snapshot_age_seconds"]; age < 0.3 {
		t.Errorf("outbox_oldest_snapshot_age_seconds = %v, want at least 0.3", age)
	}
	t.Logf("oldest snapshot holder: %s", h)
}
