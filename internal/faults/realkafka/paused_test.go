package realkafka

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/checker"
	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/faultkit"
	"github.com/pgoutbox/outbox/internal/tcpproxy"
)

// TestRealKafkaPausedRelay is issue 30's paused relay, on the real
// three-broker cluster: 3 relays (--lease 2s) under the writer's 500
// events/s over 100 aggregates; the first reaches the brokers through
// proxies, which hold its next produce request; it is SIGSTOPped at once,
// so its request is on its way when its membership ends. The other two
// take its key partitions over and publish a thousand later events; then
// the held request reaches the broker, and the relay is resumed.
//
// With --kafka-fence the new owners fenced the paused relay's
// transactional ID before publishing: the broker refuses the late request,
// and the whole log, aborted records included (read uncommitted), keeps
// every aggregate's order (checker.LogOrder); nothing is lost or
// dead-lettered, and publishing goes on. Without it, the same late
// request usually lands after the later events (6 and 8 breaks in two
// runs): logged, as a measurement, not asserted.
func TestRealKafkaPausedRelay(t *testing.T) {
	k := realCluster(t)
	for _, fence := range []bool{true, false} {
		t.Run(fmt.Sprint("fence=", fence), func(t *testing.T) {
			args := []string{"--lease", "2s"}
			if fence {
				args = append(args, "--kafka-fence")
			}
			r := startReal(t, k, realOpts{relays: 3, args: args, proxied: true})
			var proxies []*tcpproxy.Proxy
			for _, n := range k.Real.Nodes() {
				proxies = append(proxies, n.Proxy())
			}
			held := func() (n int64) {
				for _, p := range proxies {
					n += p.HeldFrames()
				}
				return n
			}
			release := func() {
				for _, p := range proxies {
					p.ReleaseHeld()
				}
			}
			t.Cleanup(release)
			victim := r.relays[0]
			before := held()
			for _, p := range proxies {
				p.HoldKafka(0) // Produce
			}
			if !faultkit.Wait(20*time.Second, func() bool { return held() > before }) {
				t.Fatalf("r0 sent no produce request in 20 s%s", r.logs())
			}
			if err := victim.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = victim.Signal(syscall.SIGCONT) })
			paused := time.Now()

			// r0's membership ends; the others own everything and publish
			// later events of its aggregates.
			if !faultkit.Wait(30*time.Second, func() bool { return !ownsAny(t, r, "r0") }) {
				t.Fatalf("r0's partitions not taken over 30 s after its pause%s", r.logs())
			}
			tookOver := time.Since(paused)
			r.waitPublished(30*time.Second, 1000, "the new owners publishing")
			release()
			if err := victim.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			t.Logf("r0 paused %s (its partitions taken over after %s), its produce request held meanwhile, then delivered",
				time.Since(paused).Round(time.Millisecond), tookOver.Round(time.Millisecond))
			name := fmt.Sprintf("paused relay, its produce request delivered after the new owners' later events (fence=%v)", fence)
			rep := r.finish(name, time.Now(), true)

			n, examples := r.logOrderExamples()
			t.Logf("%s: %d events, %d copies read committed; %d breaks of order in the log (aborted records included): %s",
				name, rep.Committed, rep.Duplicates, n, strings.Join(examples, "; "))
			if fence && n != 0 {
				t.Errorf("%d records of an aggregate lie in the log after later events of it, with --kafka-fence: %s", n, strings.Join(examples, "; "))
			}
			if !fence {
				// Not a verdict: whether this run shows the hazard depends on
				// what r0 was sending when held (a resend of a batch the
				// broker already had is answered DUPLICATE_SEQUENCE_NUMBER and
				// appends nothing). TestFenceRefusesALateProduceOfAFormerOwner
				// (internal/produce) holds a fresh request and asserts it.
				t.Logf("without --kafka-fence: %d breaks of order in the log", n)
			}
		})
	}
}

// ownsAny reports whether member owns a key partition of the run's table.
func ownsAny(t *testing.T, r *realRun, member string) bool {
	t.Helper()
	o, err := claim.ReadOwners(context.Background(), r.db.Pool, "outbox")
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(o.Relays, func(m claim.MemberOwnership) bool { return m.Member == member && len(m.Owned) > 0 })
}

// logOrder is logOrderExamples' count.
func (r *realRun) logOrder() int {
	n, _ := r.logOrderExamples()
	return n
}

// logOrderExamples reads the run's whole topic as it lies in the log
// (checker.ReadLog: aborted records included) and counts, with examples,
// the records that break an aggregate's order in it (checker.LogOrder).
func (r *realRun) logOrderExamples() (int, []string) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	exp, err := checker.ExpectedFromTable(ctx, r.db.Pool, "outbox")
	if err != nil {
		r.t.Fatal(err)
	}
	log, err := checker.ReadLog(ctx, r.k.Brokers, r.topic, false)
	if err != nil {
		r.t.Fatal(err)
	}
	return checker.LogOrder(exp, log)
}
