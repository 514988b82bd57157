package faults

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/faultkit"
	"github.com/pgoutbox/outbox/internal/testenv"
)

// The ownership tests (issue 19): relay processes sharing one table by
// owning its key partitions, with 1 and with 3 relays, at 100 and 1,000
// aggregates. --lease is 5s: a dead relay's partitions must be published
// again within lease+ownResumeSlack of its death.
const (
	ownLease       = 5 * time.Second
	ownResumeSlack = 3 * time.Second
)

// ownRelays starts relay processes with IDs prefix0.., --lease ownLease.
type ownRelays struct {
	t      *testing.T
	db     *testenv.TestDB
	k      *testenv.TestKafka
	topic  string
	prefix string
	procs  []*RelayProc
	gen    int
}

func (o *ownRelays) start() *RelayProc {
	o.t.Helper()
	o.gen++
	id := fmt.Sprintf("%s%d", o.prefix, o.gen)
	p := startRelayProc(o.t, o.db.ConnString, o.k.Brokers, o.topic, "--relay-id", id, "--lease", ownLease.String(), "--batch-size", "500")
	o.procs = append(o.procs, p)
	return p
}

// waitSettled waits until n relays are live and own the partitions as
// ownership.Assign gives them (claim.Owners.Settled), and returns the owners.
func waitSettled(t *testing.T, pool *pgxpool.Pool, n int, timeout time.Duration, procs []*RelayProc) *claim.Owners {
	t.Helper()
	var last *claim.Owners
	var lastErr error
	ok := faultkit.Wait(timeout, func() bool {
		for _, p := range procs {
			if p.Exited() && p.Err() != nil {
				t.Fatalf("%s exited: %v\n%s", p.Name, p.Err(), tail(p.Stderr(), 5000))
			}
		}
		last, lastErr = claim.ReadOwners(context.Background(), pool, "outbox")
		if lastErr != nil {
			return false
		}
		live := 0
		for _, m := range last.Relays {
			if m.Live {
				live++
			}
		}
		return live == n && last.Settled()
	})
	if !ok {
		t.Fatalf("%d relays did not settle their ownership within %s: %s (%v)", n, timeout, ownersString(last), lastErr)
	}
	return last
}

// ownersString is one line per member: how many partitions it owns.
func ownersString(o *claim.Owners) string {
	if o == nil {
		return "no owners read"
	}
	var b strings.Builder
	for _, m := range o.Relays {
		fmt.Fprintf(&b, "%s live=%v owns %d; ", m.Member, m.Live, len(m.Owned))
	}
	fmt.Fprintf(&b, "%d free", len(o.Free))
	return b.String()
}

// ownedBy returns the partitions the member whose relay ID is id owns.
func ownedBy(o *claim.Owners, id string) []int32 {
	var out []int32
	for _, m := range o.Relays {
		if m.RelayID == id {
			for _, p := range m.Owned {
				out = append(out, int32(p))
			}
		}
	}
	return out
}

// publishedBy counts published rows by the relay ID that leased them
// (locked_by is the member "<relay id>/<suffix>", with ".n" after a
// failed claim).
func publishedBy(t *testing.T, pool *pgxpool.Pool) map[string]int {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT split_part(locked_by, '/', 1), count(*) FROM outbox WHERE published_at IS NOT NULL GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		out[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// dbNow is the database clock.
func dbNow(t *testing.T, pool *pgxpool.Pool) time.Time {
	t.Helper()
	var now time.Time
	if err := pool.QueryRow(context.Background(), "SELECT clock_timestamp()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

// resumedAfter waits up to timeout until a relay other than victim has
// published a row of partitions after since (database clock), and returns
// how long after since that was.
func resumedAfter(t *testing.T, pool *pgxpool.Pool, partitions []int32, victim string, since time.Time, timeout time.Duration) (time.Duration, bool) {
	t.Helper()
	var first *time.Time
	ok := faultkit.Wait(timeout, func() bool {
		err := pool.QueryRow(context.Background(), `SELECT min(published_at) FROM outbox
WHERE key_partition = ANY($1) AND published_at > $2 AND split_part(locked_by, '/', 1) <> $3`, partitions, since, victim).Scan(&first)
		return err == nil && first != nil
	})
	if !ok {
		return 0, false
	}
	return first.Sub(since), true
}

// maxPublishGap is the longest time, between from and to (database
// clock), with no row published.
func maxPublishGap(t *testing.T, pool *pgxpool.Pool, from, to time.Time) time.Duration {
	t.Helper()
	var gap float64
	err := pool.QueryRow(context.Background(), `SELECT coalesce(max(extract(epoch FROM d)), 0) FROM (
  SELECT t - lag(t) OVER (ORDER BY t) AS d FROM (
    SELECT $1::timestamptz AS t UNION ALL SELECT $2::timestamptz
    UNION ALL SELECT published_at FROM outbox WHERE published_at BETWEEN $1 AND $2) s) g`, from, to).Scan(&gap)
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(gap * float64(time.Second))
}

// bulkInsert commits n events over aggregates agg-0.. in one transaction
// (INSERT ... SELECT FROM generate_series) and notifies channel: a bulk
// job's burst.
func bulkInsert(t *testing.T, pool *pgxpool.Pool, n, aggregates int, channel string) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload)
SELECT gen_random_uuid(), 'agg-' || (g % $2::int), 'bulk', jsonb_build_object('n', g)
FROM generate_series(1, $1::int) AS g ORDER BY g`, n, aggregates); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT pg_notify($1, '')", channel); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestProcOwnershipBurstAndBacklog: with 1 and 3 relay processes, at 100
// and 1,000 aggregates, a burst (20,000 events in one transaction, the
// relays running and settled) and a backlog (20,000 events preloaded, the
// relays started together) drain with nothing lost and per-aggregate
// order kept; after a burst every one of 3 relays has published a share.
func TestProcOwnershipBurstAndBacklog(t *testing.T) {
	t.Parallel()
	const events = 20000
	for _, relays := range []int{1, 3} {
		for _, aggs := range []int{100, 1000} {
			for _, kind := range []string{"burst", "backlog"} {
				t.Run(fmt.Sprintf("%s/%d-relays/%d-aggregates", kind, relays, aggs), func(t *testing.T) {
					db := testenv.MigratedDB(t)
					k := testenv.Kafka(t)
					o := &ownRelays{t: t, db: db, k: k, topic: k.Topic(t, 6), prefix: "own"}
					if kind == "backlog" {
						bulkInsert(t, db.Pool, events, aggs, searchPath(db.ConnString))
					}
					for range relays {
						o.start()
					}
					waitSettled(t, db.Pool, relays, 60*time.Second, o.procs)
					began := time.Now()
					if kind == "burst" {
						bulkInsert(t, db.Pool, events, aggs, searchPath(db.ConnString))
					}
					testenv.Eventually(t, 2*time.Minute, func() bool { return faultkit.Unpublished(t, db.Pool) == 0 },
						"%d events not drained by %d relays", events, relays)
					took := time.Since(began)
					by := publishedBy(t, db.Pool)
					t.Logf("%s of %d events over %d aggregates, %d relays: drained %s after settling; published by relay %v",
						kind, events, aggs, relays, took.Round(time.Millisecond), by)
					if kind == "burst" && len(by) != relays {
						t.Errorf("burst: %d relays published, want all %d: %v", len(by), relays, by)
					}
					checkTopic(t, db.Pool, k.Brokers, o.topic, fmt.Sprintf("%s %d events, %d aggregates, %d relays", kind, events, aggs, relays), 90*time.Second)
				})
			}
		}
	}
}

// TestProcOwnershipFailover: writers commit 500 events/s over 1,000
// aggregates and go on for 10 s after each fault; every subtest checks
// that nothing is lost and per-aggregate order holds, and measures when
// the victim's partitions were published again by another relay:
//   - 3 relays, one SIGTERMed: its partitions move at once (within
//     ownResumeSlack);
//   - 3 relays, one SIGKILLed: within --lease + ownResumeSlack;
//   - 3 relays, one SIGSTOPped for 3 leases, then resumed: the others
//     within --lease + ownResumeSlack, and the resumed relay rejoins;
//   - 3 relays draining a backlog, a fourth added: no second without a
//     publish, and the fourth gets its share;
//   - 1 relay SIGKILLed and a new one started: within --lease +
//     ownResumeSlack;
//   - 1 relay SIGSTOPped for 3 leases: it publishes again within
//     ownResumeSlack of SIGCONT.
func TestProcOwnershipFailover(t *testing.T) {
	t.Parallel()
	type scenario struct {
		name   string
		relays int
		// fault runs the fault on o (victim: the first relay, settled) and
		// returns the relay ID whose partitions must resume, when, and the
		// bound.
		fault func(t *testing.T, o *ownRelays) (victim string, since time.Time, within time.Duration)
		// after runs once the writers stopped (checks of the rejoin).
		after func(t *testing.T, o *ownRelays)
	}
	victimID := func(o *ownRelays) string { return o.prefix + "1" }
	scenarios := []scenario{
		{name: "sigterm/3-relays", relays: 3, fault: func(t *testing.T, o *ownRelays) (string, time.Time, time.Duration) {
			since := dbNow(t, o.db.Pool)
			o.procs[0].Term()
			if err := o.procs[0].Wait(); err != nil {
				t.Fatalf("SIGTERMed relay: %v", err)
			}
			return victimID(o), since, ownResumeSlack
		}},
		{name: "sigkill/3-relays", relays: 3, fault: func(t *testing.T, o *ownRelays) (string, time.Time, time.Duration) {
			since := dbNow(t, o.db.Pool)
			o.procs[0].Kill()
			return victimID(o), since, ownLease + ownResumeSlack
		}},
		{name: "sigstop/3-relays", relays: 3, fault: func(t *testing.T, o *ownRelays) (string, time.Time, time.Duration) {
			since := dbNow(t, o.db.Pool)
			if err := o.procs[0].Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = o.procs[0].Signal(syscall.SIGCONT) })
			return victimID(o), since, ownLease + ownResumeSlack
		}, after: func(t *testing.T, o *ownRelays) {
			waitSettled(t, o.db.Pool, 3, 30*time.Second, o.procs)
		}},
		{name: "sigkill-restart/1-relay", relays: 1, fault: func(t *testing.T, o *ownRelays) (string, time.Time, time.Duration) {
			since := dbNow(t, o.db.Pool)
			o.procs[0].Kill()
			o.start()
			return victimID(o), since, ownLease + ownResumeSlack
		}},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			db := testenv.MigratedDB(t)
			k := testenv.Kafka(t)
			o := &ownRelays{t: t, db: db, k: k, topic: k.Topic(t, 6), prefix: "fo"}
			for range sc.relays {
				o.start()
			}
			owners := waitSettled(t, db.Pool, sc.relays, 60*time.Second, o.procs)
			load := faultkit.StartLoad(t, db.Pool, writer(t, db.Pool), "agg", 1000, 5, 10*time.Millisecond)
			testenv.Eventually(t, 30*time.Second, func() bool { return faultkit.Published(t, db.Pool) >= 1000 }, "nothing published before the fault")
			victim, since, within := sc.fault(t, o)
			parts := ownedBy(owners, victim)
			if len(parts) == 0 {
				t.Fatalf("%s owned no partitions: %s", victim, ownersString(owners))
			}
			took, ok := resumedAfter(t, db.Pool, parts, victim, since, within+10*time.Second)
			switch {
			case !ok:
				t.Errorf("%s: no other relay published %s's %d partitions within %s", sc.name, victim, len(parts), within+10*time.Second)
			case took > within:
				t.Errorf("%s: %s's partitions were published again %s after the fault, want at most %s", sc.name, victim, took.Round(time.Millisecond), within)
			}
			t.Logf("%s: %s's %d partitions published again %s after the fault (bound %s)", sc.name, victim, len(parts), took.Round(time.Millisecond), within)
			if strings.HasPrefix(sc.name, "sigstop") {
				time.Sleep(3*ownLease - time.Since(since.Local())) // the victim stays stopped for 3 leases
				if err := o.procs[0].Signal(syscall.SIGCONT); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(10 * time.Second) // writers go on after the fault
			load.Stop()
			if sc.after != nil {
				sc.after(t, o)
			}
			testenv.Eventually(t, 60*time.Second, func() bool { return faultkit.Unpublished(t, db.Pool) == 0 }, "backlog not drained after %s", sc.name)
			rep := checkTopic(t, db.Pool, k.Brokers, o.topic, sc.name+" under 500 events/s, 1,000 aggregates", 90*time.Second)
			if rep.Committed != int(load.Committed.Load()) {
				t.Errorf("%d events in the table, %d committed by the writer", rep.Committed, load.Committed.Load())
			}
			t.Logf("%s: %d events, published by relay %v", sc.name, rep.Committed, publishedBy(t, db.Pool))
		})
	}

	t.Run("sigstop/1-relay", func(t *testing.T) {
		db := testenv.MigratedDB(t)
		k := testenv.Kafka(t)
		o := &ownRelays{t: t, db: db, k: k, topic: k.Topic(t, 6), prefix: "fo"}
		o.start()
		waitSettled(t, db.Pool, 1, 60*time.Second, o.procs)
		load := faultkit.StartLoad(t, db.Pool, writer(t, db.Pool), "agg", 1000, 5, 10*time.Millisecond)
		testenv.Eventually(t, 30*time.Second, func() bool { return faultkit.Published(t, db.Pool) >= 1000 }, "nothing published before the fault")
		if err := o.procs[0].Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * ownLease)
		resumed := dbNow(t, db.Pool)
		if err := o.procs[0].Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		var first *time.Time
		if !faultkit.Wait(ownResumeSlack+10*time.Second, func() bool {
			return db.Pool.QueryRow(context.Background(), "SELECT min(published_at) FROM outbox WHERE published_at > $1", resumed).Scan(&first) == nil && first != nil
		}) {
			t.Fatalf("nothing published within %s of SIGCONT", ownResumeSlack+10*time.Second)
		}
		took := first.Sub(resumed)
		if took > ownResumeSlack {
			t.Errorf("published again %s after SIGCONT, want at most %s", took.Round(time.Millisecond), ownResumeSlack)
		}
		t.Logf("sigstop/1-relay: published again %s after SIGCONT (stopped %s)", took.Round(time.Millisecond), 3*ownLease)
		time.Sleep(10 * time.Second)
		load.Stop()
		testenv.Eventually(t, 60*time.Second, func() bool { return faultkit.Unpublished(t, db.Pool) == 0 }, "backlog not drained")
		checkTopic(t, db.Pool, k.Brokers, o.topic, "1 relay SIGSTOPped for 3 leases under 500 events/s", 90*time.Second)
	})

	t.Run("join/3+1-relays", func(t *testing.T) {
		db := testenv.MigratedDB(t)
		k := testenv.Kafka(t)
		o := &ownRelays{t: t, db: db, k: k, topic: k.Topic(t, 6), prefix: "fo"}
		bulkInsert(t, db.Pool, 60000, 1000, searchPath(db.ConnString))
		for range 3 {
			o.start()
		}
		load := faultkit.StartLoad(t, db.Pool, writer(t, db.Pool), "agg", 1000, 5, 10*time.Millisecond)
		testenv.Eventually(t, 30*time.Second, func() bool { return faultkit.Published(t, db.Pool) >= 2000 }, "nothing published before the join")
		joined := dbNow(t, db.Pool)
		o.start()
		time.Sleep(5 * time.Second)
		gap := maxPublishGap(t, db.Pool, joined, dbNow(t, db.Pool))
		if gap > time.Second {
			t.Errorf("the fourth relay's join paused publishing for %s", gap.Round(time.Millisecond))
		}
		waitSettled(t, db.Pool, 4, 30*time.Second, o.procs)
		time.Sleep(5 * time.Second)
		load.Stop()
		testenv.Eventually(t, 60*time.Second, func() bool { return faultkit.Unpublished(t, db.Pool) == 0 }, "backlog not drained")
		by := publishedBy(t, db.Pool)
		t.Logf("join: longest gap between publishes in the 5 s after the join %s; published by relay %v", gap.Round(time.Millisecond), by)
		if by["fo4"] == 0 {
			t.Errorf("the fourth relay published nothing: %v", by)
		}
		checkTopic(t, db.Pool, k.Brokers, o.topic, "a fourth relay joins 3 draining a backlog under 500 events/s", 90*time.Second)
	})
}
