package faults

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/checker"
	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/listen"
	"github.com/pgoutbox/outbox/internal/pgtemp"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/lease"
	"github.com/pgoutbox/outbox/notify"
	"github.com/pgoutbox/outbox/relay"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

// TestInprocPostgresRestartedUnderLoad: the test's own throwaway cluster
// (not the shared database, which other tests use) is restarted (fast
// shutdown, then start: what `pg_ctl restart` does) while a writer commits
// events continuously. The relay's pool and listener reconnect by
// themselves and every committed event is delivered. Writer errors while
// the server is down are expected; the table is the ground truth of what
// was committed (a commit whose answer was lost may still have committed).
func TestInprocPostgresRestartedUnderLoad(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if _, err := pgtemp.FindBinDir(); err != nil {
		t.Skipf("no PostgreSQL server binaries: %v", err)
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cluster, err := pgtemp.Start(sctx, pgtemp.Options{}) // fsync off
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cluster.Stop(); err != nil {
			t.Errorf("stop cluster: %v", err)
		}
	})
	newPool := func() *pgxpool.Pool {
		cfg, err := pgxpool.ParseConfig(cluster.DSN())
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns = 8
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}
	relayPool, writerPool := newPool(), newPool()
	if _, err := outboxsql.Migrate(sctx, relayPool); err != nil {
		t.Fatal(err)
	}
	db := &testenv.TestDB{Pool: relayPool, ConnString: cluster.DSN(), Schema: "outbox_restart"}
	k := testenv.Kafka(t)
	topic := k.Topic(t, 4)
	h := ipStartRelay(t, db, k.Brokers, topic, ipConfig{
		Relay: relay.Config{PollInterval: 200 * time.Millisecond, RetryMin: 100 * time.Millisecond, RetryMax: time.Second, DBTimeout: 2 * time.Second},
		// A short lease: rows published but not marked while the server
		// was down come back soon (as duplicates).
		Lease:  lease.Config{Lease: 3 * time.Second},
		Notify: notify.Config{Channel: db.Schema, ReconnectMin: 50 * time.Millisecond, ReconnectMax: time.Second},
	})
	w, err := outbox.NewWriter(outbox.WriterConfig{Channel: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	load := ipStartLoad(t, writerPool, w, "agg", 40, 2, 2*time.Millisecond)
	testenv.Eventually(t, 15*time.Second, func() bool { return ipPublished(t, relayPool) >= 200 }, "nothing published before the restart")

	reconnects := h.Listener.Reconnects()
	committed := load.Committed.Load()
	start := time.Now()
	if err := cluster.Restart(sctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	t.Logf("restart took %s", time.Since(start).Round(time.Millisecond))
	// The test's own checks use a pool opened after the restart: the
	// relay's pool may still hand out a connection the restart broke once
	// (which the relay retries; a check here would fail the test).
	checkPool := newPool()
	testenv.Eventually(t, 20*time.Second, func() bool { return load.Committed.Load() >= committed+200 }, "the writer did not commit again after the restart (last error: %v)", load.LastErr())
	testenv.Eventually(t, 20*time.Second, func() bool {
		return h.Listener.Reconnects() > reconnects && h.Listener.State() == listen.StateListening
	}, "the listener did not reconnect")
	load.Stop()
	testenv.Eventually(t, 30*time.Second, func() bool { return ipUnpublished(t, checkPool) == 0 }, "not everything published after the restart")

	// Every event the writer saw committed is in the table (and so checked).
	ids := load.IDs()
	if n := ipCount(t, checkPool, "SELECT count(*) FROM outbox WHERE id = ANY($1)", ids); n != len(ids) {
		t.Fatalf("%d of the %d events whose commit succeeded are in the table", n, len(ids))
	}
	lastErr := load.LastErr()
	t.Logf("writer: %d events committed, %d transactions failed during the restart (last: %v); relay stats %+v",
		len(ids), load.Failed.Load(), lastErr, h.Relay.Stats())
	checkTopic(t, checkPool, k.Brokers, topic, "Postgres restarted under load", 30*time.Second)
}

// TestInprocListenerTerminatedRepeatedly: the listener's backend is killed
// with pg_terminate_backend five times. After each reconnect an event
// written with a notification arrives within a few seconds although the
// relay's poll interval is a minute, and the notification itself arrives on
// the new connection: latency comes back to the notification path.
func TestInprocListenerTerminatedRepeatedly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	topic := k.Topic(t, 1)
	h := ipStartRelay(t, db, k.Brokers, topic, ipConfig{
		Relay:  relay.Config{PollInterval: time.Minute},
		Notify: notify.Config{ReconnectMin: 50 * time.Millisecond, ReconnectMax: 500 * time.Millisecond},
	})
	obs, err := checker.NewObserver(ctx, k.Brokers, topic)
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Stop()
	w := writer(t, db.Pool) // WakeupEveryTx on the test schema's channel

	killed := []int32{}
	listenerPID := func() int32 {
		var pid int32
		testenv.Eventually(t, 10*time.Second, func() bool {
			err := db.Pool.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE query = 'listen "' || $1 || '"' AND NOT pid = ANY($2)`, db.Schema, killed).Scan(&pid)
			return err == nil
		}, "no listener backend found")
		return pid
	}
	const rounds = 5
	for i := 0; i < rounds; i++ {
		pid := listenerPID()
		reconnects, claims := h.Listener.Reconnects(), h.Relay.Stats().Claims
		if _, err := db.Pool.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
			t.Fatal(err)
		}
		killed = append(killed, pid)
		testenv.Eventually(t, 10*time.Second, func() bool {
			return h.Listener.Reconnects() > reconnects && h.Listener.State() == listen.StateListening
		}, "round %d: the listener did not reconnect", i)
		// The claim that every reconnect triggers has run: only the
		// notification of the next event can wake the relay now.
		testenv.Eventually(t, 10*time.Second, func() bool { return h.Relay.Stats().Claims > claims }, "round %d: no claim after the reconnect", i)
		notifications, wakes := h.Listener.Notifications(), h.Relay.Stats().WakeNotify
		start := time.Now()
		ipInsert(t, db.Pool, w, ipEvent("agg", i))
		// A hang guard under the poll interval: the poll timer restarts at
		// every claim, so only the notification can wake the relay within
		// 30 s (WakePoll, checked below, tells).
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		ok := obs.WaitDistinct(wctx, i+1)
		cancel()
		if !ok {
			t.Fatalf("round %d: the event did not arrive within 30s of its commit after the listener reconnected (poll interval 1m); stats %+v", i, h.Relay.Stats())
		}
		latency := time.Since(start)
		testenv.Eventually(t, 5*time.Second, func() bool { return h.Listener.Notifications() > notifications }, "round %d: the notification did not arrive on the new connection", i)
		if st := h.Relay.Stats(); st.WakeNotify <= wakes || st.WakePoll != 0 {
			t.Fatalf("round %d: stats %+v: want a notification wake-up and no poll", i, st)
		}
		t.Logf("round %d: listener backend %d terminated, reconnected; commit-to-consume %s", i, pid, latency.Round(time.Millisecond))
	}
	checkTopic(t, db.Pool, k.Brokers, topic, "listener backend terminated x5", 10*time.Second)
}

// TestInprocNonUTCSessionTimeZone: the relay's sessions run with TimeZone
// America/New_York and Asia/Kathmandu (+05:45). Leases are still right,
// because all lease arithmetic happens in SQL on timestamptz:
// locked_until = now() + lease is an absolute instant, compared with now()
// of whatever session, and the session TimeZone only changes how a
// timestamptz is rendered as text, never its value. The relay host's clock
// does not matter for the same reason: the relay never sends a wall-clock
// time to the database, and measures only elapsed durations on the
// monotonic clock (poll interval, backoff, shutdown timeout). A host clock
// minutes off cannot be faked in-process, so this test checks the
// mechanism instead: the lease as seen by the database (locked_until minus
// now(), both SQL) equals the configured lease in every session, and a
// relay in another time zone takes the rows over exactly when the lease
// ends by the database's clock.
func TestInprocNonUTCSessionTimeZone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	topic := k.Topic(t, 2)
	tzPool := func(tz string) *pgxpool.Pool {
		cfg, err := pgxpool.ParseConfig(db.ConnString)
		if err != nil {
			t.Fatal(err)
		}
		cfg.ConnConfig.RuntimeParams["TimeZone"] = tz
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		var got string
		if err := p.QueryRow(ctx, "SHOW TimeZone").Scan(&got); err != nil || got != tz {
			t.Fatalf("session TimeZone %q (%v), want %q", got, err, tz)
		}
		return p
	}
	ny, ktm := tzPool("America/New_York"), tzPool("Asia/Kathmandu")

	w := writer(t, db.Pool)
	evs := ipEvents(3, 3)
	ipInsert(t, db.Pool, w, evs...)

	// A relay in New York claims everything with a 2 s lease and stalls.
	const stalledLease = 2 * time.Second
	stalled, err := claim.New(ny, lease.Config{RelayID: "ny-stalled", Lease: stalledLease})
	if err != nil {
		t.Fatal(err)
	}
	claimed := time.Now()
	b, err := stalled.Claim(ctx)
	if err != nil || len(b.Rows) != len(evs) {
		t.Fatalf("claim: %v, %d rows", err, len(b.Rows))
	}
	// The database's view, from a session in Kathmandu: locked_until -
	// now() is the lease (less the few milliseconds since the claim).
	var minLeft, maxLeft float64
	var sameInstant bool
	if err := ktm.QueryRow(ctx, `SELECT min(extract(epoch FROM locked_until - now())), max(extract(epoch FROM locked_until - now())), bool_and(locked_until = $1)
		FROM outbox WHERE locked_by = $2`, b.LockedUntil, stalled.Holder()).Scan(&minLeft, &maxLeft, &sameInstant); err != nil {
		t.Fatal(err)
	}
	// At most the time since the claim began has gone by, however slow
	// the machine (both clocks are this host's).
	elapsed := time.Since(claimed).Seconds()
	if minLeft < stalledLease.Seconds()-elapsed || maxLeft > stalledLease.Seconds() || !sameInstant {
		t.Fatalf("lease left by the database clock %.3f..%.3fs, want %s less at most the %.3fs since the claim began; same instant as the claim returned: %v",
			minLeft, maxLeft, stalledLease, elapsed, sameInstant)
	}
	// The same instant renders in each session's zone.
	var nyText, ktmText string
	if err := ny.QueryRow(ctx, "SELECT $1::timestamptz::text", b.LockedUntil).Scan(&nyText); err != nil {
		t.Fatal(err)
	}
	if err := ktm.QueryRow(ctx, "SELECT $1::timestamptz::text", b.LockedUntil).Scan(&ktmText); err != nil {
		t.Fatal(err)
	}
	if !(strings.HasSuffix(nyText, "-05") || strings.HasSuffix(nyText, "-04")) || !strings.HasSuffix(ktmText, "+05:45") {
		t.Fatalf("locked_until renders as %q in New York and %q in Kathmandu", nyText, ktmText)
	}
	t.Logf("locked_until %s (New York) = %s (Kathmandu); lease left %.3fs", nyText, ktmText, minLeft)

	// A relay in Kathmandu, with its own 1 s lease, takes the rows over
	// once the New York lease ended by the database clock, not before.
	taker := ipStartRelay(t, db, k.Brokers, topic, ipConfig{
		Relay:    relay.Config{PollInterval: 50 * time.Millisecond},
		Lease:    lease.Config{RelayID: "ktm", Lease: time.Second},
		Pool:     ktm,
		NoNotify: true,
	})
	testenv.Eventually(t, 15*time.Second, func() bool { return ipUnpublished(t, db.Pool) == 0 }, "the Kathmandu relay did not take over after the lease")
	var early int
	if err := ktm.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE published_at < $1 OR locked_by <> $2", b.LockedUntil, taker.Holder).Scan(&early); err != nil {
		t.Fatal(err)
	}
	if early != 0 {
		t.Fatalf("%d rows published before the New York lease ended, or not by the taker", early)
	}
	// The taker's own leases, computed in a +05:45 session, are 1 s too:
	// the stalled relay's late mark is fenced out, and a direct claim from
	// the taker's claimer on new rows leases them for 1 s by the database.
	if n, err := stalled.MarkPublished(ctx, b.Token, []int64{b.Rows[0].Seq}); err != nil || n != 0 {
		t.Fatalf("late mark from New York: %d rows, %v", n, err)
	}
	taker.Stop()
	more := ipEvents(1, 1)
	ipInsert(t, db.Pool, w, more...)
	claimed = time.Now()
	b2, err := taker.Claimer.Claim(ctx)
	if err != nil || len(b2.Rows) != 1 {
		t.Fatalf("claim in Kathmandu: %v, %d rows", err, len(b2.Rows))
	}
	var left float64
	if err := ny.QueryRow(ctx, "SELECT extract(epoch FROM locked_until - now()) FROM outbox WHERE id = $1", more[0].ID).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if elapsed := time.Since(claimed).Seconds(); left < 1-elapsed || left > 1 {
		t.Fatalf("Kathmandu lease left by the database clock (read in New York) %.3fs, want 1s less at most the %.3fs since the claim began", left, elapsed)
	}
	if _, err := taker.Claimer.Release(ctx, claim.Settle{Token: b2.Token, Seqs: []int64{b2.Rows[0].Seq}}); err != nil {
		t.Fatal(err)
	}
	// Publish the last row so the checker sees every committed event.
	ipStartRelay(t, db, k.Brokers, topic, ipConfig{Pool: ny, NoNotify: true, Relay: relay.Config{PollInterval: 50 * time.Millisecond}})
	testenv.Eventually(t, 10*time.Second, func() bool { return ipUnpublished(t, db.Pool) == 0 }, "last row not published")
	checkTopic(t, db.Pool, k.Brokers, topic, "session TimeZone New York / Kathmandu", 10*time.Second)
}
