package faults

import (
	"context"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgoutbox/outbox/internal/faultkit"
	"github.com/pgoutbox/outbox/internal/testenv"
)

// staticMaxLatency is issue 29's goal 3: a relay restarted with the same
// --relay-id 3 s after a SIGKILL resumes its share at once, at the
// default --lease (30 s).
const staticMaxLatency = 5 * time.Second

// memberStarted is the started_at of member's row in outbox_relays (zero
// when there is none).
func memberStarted(t *testing.T, pool *pgxpool.Pool, member string) time.Time {
	t.Helper()
	var at time.Time
	_ = pool.QueryRow(context.Background(), "SELECT started_at FROM outbox_relays WHERE member = $1", member).Scan(&at)
	return at
}

// maxLatency is the longest time from an event's transaction start to its
// mark (database clock) among the events in the table.
func maxLatency(t *testing.T, pool *pgxpool.Pool) time.Duration {
	t.Helper()
	var s float64
	if err := pool.QueryRow(context.Background(), "SELECT coalesce(max(extract(epoch FROM published_at - created_at)), 0) FROM outbox").Scan(&s); err != nil {
		t.Fatal(err)
	}
	return time.Duration(s * float64(time.Second))
}

// TestProcStaticRestart (issue 29, goal 3): one relay with --relay-id
// pod-0 at the default --lease (30 s) under 500 events/s over 1,000
// aggregates; its process is stopped, and 3 s later a new one with the
// same relay ID starts:
//   - sigkill: the old process is gone (its presence session with it), so
//     the new one ends its leases and resumes everything at once: max
//     latency at most staticMaxLatency;
//   - sigstop: the old process is paused, its session alive, so the new
//     one owns every partition at once but leaves the old one's leases
//     (and their aggregates' later events) until they end; the old one is
//     resumed after the takeover and must publish nothing that breaks
//     order, claim nothing more, and say it was replaced.
//
// Either way nothing is lost and an independent consumer finds every
// aggregate's events in order.
func TestProcStaticRestart(t *testing.T) {
	t.Parallel()
	for _, sig := range []string{"sigkill", "sigkill-mid-publish", "sigstop"} {
		t.Run(sig, func(t *testing.T) {
			db := testenv.MigratedDB(t)
			var k *testenv.TestKafka
			if sig == "sigkill-mid-publish" {
				k = testenv.KafkaFake(t)
			} else {
				k = testenv.Kafka(t)
			}
			topic := k.Topic(t, 6)
			const id = "pod-0"
			old := startRelayProc(t, db.ConnString, k.Brokers, topic, "--relay-id", id, "--batch-size", "500")
			waitSettled(t, db.Pool, 1, 60*time.Second, []*RelayProc{old})
			first := memberStarted(t, db.Pool, id)
			load := faultkit.StartLoad(t, db.Pool, writer(t, db.Pool), "agg", 1000, 5, 10*time.Millisecond)
			testenv.Eventually(t, 30*time.Second, func() bool { return faultkit.Published(t, db.Pool) >= 1000 }, "nothing published before the fault")
			// The old process declared its presence (its session's lock).
			testenv.Eventually(t, 30*time.Second, func() bool {
				var n int
				_ = db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox_order_guard WHERE key LIKE 'presence:pod-0/%' AND until > now()").Scan(&n)
				return n == 1
			}, "the old process never declared its presence")
			if sig == "sigkill-mid-publish" {
				// Hold the old process's next produce request, so that it
				// is killed with rows leased (and maybe sent): the new one
				// must end those leases at once, not wait 30 s.
				release, held := make(chan struct{}), make(chan struct{})
				var once sync.Once
				k.Cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
					k.Cluster.DropControl()
					once.Do(func() { close(held) })
					k.Cluster.SleepControl(func() { <-release })
					return nil, nil, false
				})
				<-held
				t.Cleanup(func() { closeOnce(release) })
				old.Kill()
				closeOnce(release)
			}
			stopped := time.Now()
			if sig == "sigkill" {
				old.Kill()
			} else if sig == "sigstop" {
				if err := old.Signal(syscall.SIGSTOP); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = old.Signal(syscall.SIGCONT) })
			}
			time.Sleep(3 * time.Second) // the restart's delay (the fault itself)
			restarted := time.Now()
			next := startRelayProc(t, db.ConnString, k.Brokers, topic, "--relay-id", id, "--batch-size", "500")
			testenv.Eventually(t, 30*time.Second, func() bool {
				at := memberStarted(t, db.Pool, id)
				return !at.IsZero() && !at.Equal(first)
			}, "the new process did not take the relay ID's row over")
			t.Logf("%s: took over %s after the new process started", sig, time.Since(restarted).Round(time.Millisecond))
			if sig == "sigstop" {
				if err := old.Signal(syscall.SIGCONT); err != nil {
					t.Fatal(err)
				}
				testenv.Eventually(t, 30*time.Second, func() bool {
					return strings.Contains(old.Stderr(), "a later process with this relay ID took its membership over")
				}, "the resumed old process never said it was replaced:\n%s", tail(old.Stderr(), 3000))
			}
			time.Sleep(10 * time.Second) // writers go on after the fault
			load.Stop()
			testenv.Eventually(t, 90*time.Second, func() bool { return faultkit.Unpublished(t, db.Pool) == 0 }, "backlog not drained after %s", sig)
			rep := checkTopic(t, db.Pool, k.Brokers, topic, sig+" of a static member, restarted 3 s later, under 500 events/s", 90*time.Second)
			if rep.Committed != int(load.Committed.Load()) {
				t.Errorf("%d events in the table, %d committed by the writer", rep.Committed, load.Committed.Load())
			}
			lat := maxLatency(t, db.Pool)
			t.Logf("%s + restart after 3 s (stopped %s before the new process): max latency %s (goal %s); %d events, %d duplicates; published by %v; new process:\n%s",
				sig, restarted.Sub(stopped).Round(time.Millisecond), lat.Round(time.Millisecond), staticMaxLatency, rep.Committed, rep.Duplicates,
				publishedBy(t, db.Pool), grepLines(next.Stderr(), "took the relay ID"))
			if took := grepLines(next.Stderr(), "took the relay ID"); sig == "sigkill-mid-publish" && (took == "" || strings.Contains(took, `"leases_ended": 0`)) {
				t.Errorf("the new process ended none of the killed one's leases: %q", took)
			}
			if strings.HasPrefix(sig, "sigkill") && lat > staticMaxLatency {
				t.Errorf("max latency %s after a SIGKILL and a restart 3 s later, want at most %s", lat.Round(time.Millisecond), staticMaxLatency)
			}
			if sig == "sigstop" {
				if lat > 30*time.Second+10*time.Second {
					t.Errorf("max latency %s with the old process paused, want at most the lease and a margin", lat.Round(time.Millisecond))
				}
				old.Term()
				if err := old.WaitTimeout(30 * time.Second); err != nil {
					t.Errorf("replaced process after SIGTERM: %v", err)
				}
				if at := memberStarted(t, db.Pool, id); at.IsZero() || at.Equal(first) {
					t.Errorf("the replaced process's SIGTERM removed the new one's membership")
				}
			}
		})
	}
}

// closeOnce closes ch unless it is closed.
func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// grepLines returns the lines of s containing sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
