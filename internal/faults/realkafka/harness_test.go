package realkafka

// The harness of the real-broker fault suite: relay processes on a table,
// a steady writer, and faults injected into a real Apache Kafka cluster
// (internal/kafkatemp) by signals to its brokers and by its admin API.
// OUTBOX_FAULTS_REAL_SCALE scales the faults' durations,
// OUTBOX_FAULTS_DEBUG=1 runs the relays at debug level, and
// OUTBOX_FAULTS_LOGDIR=dir keeps every relay's whole log there.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/pgoutbox/outbox/internal/checker"
	"github.com/pgoutbox/outbox/internal/faultkit"
	"github.com/pgoutbox/outbox/internal/kafkatemp"
	"github.com/pgoutbox/outbox/internal/testenv"
)

// realCluster returns the package's real three-broker Kafka 4.4.0 cluster
// (replication factor 3, min.insync.replicas 2, as production clusters
// run), started on first use. Every test that harms it heals it before it
// ends (realRun registers the healing).
func realCluster(t *testing.T) *testenv.TestKafka {
	t.Helper()
	// Proxied: a relay may reach the brokers through proxies that can
	// hold its requests (realOpts.proxied).
	return testenv.SharedRealKafka(t, "3-brokers", kafkatemp.Options{Version: kafkatemp.V44, Brokers: 3, Proxied: true})
}

// realScale returns d, shortened under -short and by
// OUTBOX_FAULTS_REAL_SCALE (a factor, e.g. 0.5): the faults last as the
// issue that asked for them says unless told otherwise.
func realScale(t *testing.T, d time.Duration) time.Duration {
	t.Helper()
	f := 1.0
	if v := os.Getenv("OUTBOX_FAULTS_REAL_SCALE"); v != "" {
		if _, err := fmt.Sscanf(v, "%g", &f); err != nil || f <= 0 {
			t.Fatalf("OUTBOX_FAULTS_REAL_SCALE=%q: want a positive number", v)
		}
	} else if testing.Short() {
		f = 0.25
	}
	return time.Duration(float64(d) * f)
}

// realOpts configures a realRun.
type realOpts struct {
	// relays is the number of relay processes (default 3).
	relays int
	// aggregates the writer spreads its events over (default 100) and the
	// topic's partitions (default 6).
	aggregates, partitions int
	// eventsPerTick events are committed in one transaction every 10 ms
	// (default 5: 500 events/s).
	eventsPerTick int
	// args are extra relay flags.
	args []string
	// proxied makes the first relay (r0) reach the brokers only through
	// the cluster's proxies (kafkatemp.Options.Proxied).
	proxied bool
}

// realRun is one scenario: a schema, a topic on the cluster, relays, and a
// writer that commits events at a steady rate until stopped.
type realRun struct {
	t      *testing.T
	k      *testenv.TestKafka
	adm    *kadm.Client
	db     *testenv.TestDB
	topic  string
	relays []*faultkit.RelayProc
	load   *faultkit.Load
	opts   realOpts
}

// startReal starts the relays on a new table and topic and the writer, and
// waits until events flow.
func startReal(t *testing.T, k *testenv.TestKafka, o realOpts) *realRun {
	t.Helper()
	if o.relays == 0 {
		o.relays = 3
	}
	if o.aggregates == 0 {
		o.aggregates = 100
	}
	if o.partitions == 0 {
		o.partitions = 6
	}
	if o.eventsPerTick == 0 {
		o.eventsPerTick = 5
	}
	r := &realRun{t: t, k: k, adm: kadm.NewClient(k.Client(t)), db: testenv.MigratedDB(t), opts: o}
	r.topic = k.Topic(t, int32(o.partitions))
	for i := range o.relays {
		r.relays = append(r.relays, r.startRelay(i))
	}
	for _, p := range r.relays {
		p.WaitReady(60 * time.Second)
	}
	r.load = faultkit.StartLoad(t, r.db.Pool, faultkit.Writer(t, r.db.Pool), "agg", o.aggregates, o.eventsPerTick, 10*time.Millisecond)
	r.waitPublished(20*time.Second, 100, "events flowing before the fault")
	return r
}

func (r *realRun) startRelay(i int) *faultkit.RelayProc {
	args := append([]string{"--relay-id", fmt.Sprintf("r%d", i)}, r.opts.args...)
	if os.Getenv("OUTBOX_FAULTS_DEBUG") != "" {
		args = append(args, "--log-level", "debug")
	}
	brokers := r.k.Brokers
	if i == 0 && r.opts.proxied {
		brokers = r.k.Real.ProxiedBrokers()
	}
	return faultkit.StartRelay(r.t, r.db.ConnString, brokers, r.topic, args...)
}

// published returns the number of published rows.
func (r *realRun) published() int { return faultkit.Published(r.t, r.db.Pool) }

// waitPublished waits until at least n more rows are published than now.
func (r *realRun) waitPublished(timeout time.Duration, n int, what string) {
	r.t.Helper()
	from := r.published()
	if !faultkit.Wait(timeout, func() bool { return r.published() >= from+n }) {
		r.t.Fatalf("%s: fewer than %d events published in %s (%d unpublished)%s", what, n, timeout, faultkit.Unpublished(r.t, r.db.Pool), r.logs())
	}
}

// saveLogs writes every relay's whole log to $OUTBOX_FAULTS_LOGDIR, if
// set, as <test>-<relay>.log with the fault's end marked.
func (r *realRun) saveLogs() {
	dir := os.Getenv("OUTBOX_FAULTS_LOGDIR")
	if dir == "" {
		return
	}
	for _, p := range r.relays {
		name := strings.NewReplacer("/", "_", " ", "_").Replace(r.t.Name()) + "-" + p.Name + ".log"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(p.Stderr()), 0o644); err != nil {
			r.t.Logf("save relay log: %v", err)
		}
	}
}

// logs returns the tail of every relay's log, for a failure message.
func (r *realRun) logs() string {
	var b strings.Builder
	for _, p := range r.relays {
		fmt.Fprintf(&b, "\n--- %s ---\n%s", p.Name, faultkit.Tail(p.Stderr(), 4000))
	}
	return b.String()
}

// finish asserts what every real-broker fault must leave behind, given
// when the fault ended: the writer goes on for after (at least 5 s), then
// every event committed before the fault ended is published within 10 s of
// its end and every later one within 10 s of the writer's stop; no event
// is dead-lettered and, when outage is set (the fault was a condition of
// the cluster), no event counted a failed attempt; the checker finds
// nothing lost and every aggregate in order.
func (r *realRun) finish(name string, faultEnd time.Time, outage bool) checker.Report {
	r.t.Helper()
	t := r.t
	defer r.saveLogs()
	oldWaiting := func() int {
		return faultkit.Count(t, r.db.Pool, "SELECT count(*) FROM outbox WHERE published_at IS NULL AND created_at <= $1", faultEnd)
	}
	// How long the events committed before the fault's end took to go
	// out after it, measured up to a minute, then held to 10 s.
	t.Logf("fault ended at %s", faultEnd.UTC().Format("15:04:05.000"))
	faultkit.Wait(time.Until(faultEnd.Add(time.Minute)), func() bool { return oldWaiting() == 0 })
	recovered := time.Since(faultEnd)
	t.Logf("%s: the events committed before the fault's end were all published %s after it", name, recovered.Round(10*time.Millisecond))
	if n := oldWaiting(); n > 0 || recovered > 10*time.Second {
		t.Errorf("%s: events committed before the fault's end published %s after it (%d still waiting), want within 10 s; published per second from the fault's end: %s%s",
			name, recovered.Round(10*time.Millisecond), n, r.publishedPerSecond(faultEnd), r.logs())
	}
	time.Sleep(time.Until(faultEnd.Add(5 * time.Second)))
	r.load.Stop()
	if err := r.load.LastErr(); err != nil {
		t.Logf("%s: writer errors: %d transactions failed, last: %v", name, r.load.Failed.Load(), err)
	}
	if !faultkit.Wait(10*time.Second, func() bool { return faultkit.Unpublished(t, r.db.Pool) == 0 }) {
		t.Errorf("%s: %d events unpublished 10 s after the writer stopped%s", name, faultkit.Unpublished(t, r.db.Pool), r.logs())
	}
	if n := faultkit.Count(t, r.db.Pool, "SELECT count(*) FROM outbox WHERE dead_lettered_at IS NOT NULL"); n != 0 {
		t.Errorf("%s: %d events dead-lettered by a condition of the cluster", name, n)
	}
	if outage {
		if n := faultkit.Count(t, r.db.Pool, "SELECT coalesce(max(attempts), 0) FROM outbox"); n != 0 {
			t.Errorf("%s: an event counted %d failed attempts for a condition of the cluster", name, n)
		}
	}
	for _, p := range r.relays {
		if p.Exited() {
			t.Errorf("%s: %s exited: %v\n%s", name, p.Name, p.Err(), faultkit.Tail(p.Stderr(), 4000))
		}
	}
	return faultkit.CheckTopic(t, r.db.Pool, r.k.Brokers, r.topic, name, 60*time.Second)
}

// publishedPerSecond says how many events were marked published in each
// second from since on (a recovery's shape, for a failure message).
func (r *realRun) publishedPerSecond(since time.Time) string {
	rows, err := r.db.Pool.Query(context.Background(), `SELECT floor(extract(epoch FROM published_at - $1))::int, count(*)
		FROM outbox WHERE published_at >= $1 GROUP BY 1 ORDER BY 1`, since)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var sec, n int
		if err := rows.Scan(&sec, &n); err != nil {
			return err.Error()
		}
		fmt.Fprintf(&b, "+%ds:%d ", sec, n)
	}
	return b.String()
}

// leaders returns, for each partition of the run's topic, its leader's
// node ID, and the node leading the most partitions.
func (r *realRun) leaders() (map[int32]int32, int) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	md, err := r.adm.Metadata(ctx, r.topic)
	if err != nil {
		r.t.Fatalf("metadata: %v", err)
	}
	out := map[int32]int32{}
	count := map[int32]int{}
	for _, p := range md.Topics[r.topic].Partitions {
		out[p.Partition] = p.Leader
		count[p.Leader]++
	}
	best := int32(-1)
	for _, n := range r.k.Real.Nodes() {
		if id := int32(n.ID); best < 0 || count[id] > count[best] {
			best = id
		}
	}
	return out, int(best)
}

// setTopicConfig sets (value non-nil) or removes a topic config.
func (r *realRun) setTopicConfig(name string, value *string) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	op := kadm.SetConfig
	if value == nil {
		op = kadm.DeleteConfig
	}
	resp, err := r.adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: op, Name: name, Value: value}}, r.topic)
	if err == nil {
		for _, c := range resp {
			if c.Err != nil {
				err = fmt.Errorf("%w: %s", c.Err, c.ErrMessage)
			}
		}
	}
	if err != nil {
		r.t.Fatalf("alter topic config %s: %v", name, err)
	}
}

// healNodes makes sure the nodes run (not killed, not paused) and waits
// until the cluster has all its brokers again.
func healNodes(t *testing.T, k *testenv.TestKafka, ids ...int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, id := range ids {
		n := k.Real.Node(id)
		if n.Running() {
			_ = n.Resume()
			continue
		}
		if err := n.Launch(); err != nil {
			t.Fatalf("restart broker %d: %v", id, err)
		}
	}
	if err := k.Real.WaitBrokers(ctx, len(k.Real.Nodes())); err != nil {
		t.Fatalf("cluster not whole again: %v", err)
	}
	for _, id := range ids {
		if err := k.Real.Node(id).WaitReady(ctx); err != nil {
			t.Fatalf("broker %d: %v", id, err)
		}
	}
}

// waitISR waits until every partition of the run's topic has want
// in-sync replicas: a restarted broker is registered at once, but its
// replicas rejoin the ISR only once they caught up, and until then a
// topic with min.insync.replicas 2 refuses writes (NOT_ENOUGH_REPLICAS)
// if a second replica is missing too. The cluster's recovery ends there;
// the relay's starts.
func (r *realRun) waitISR(want int, timeout time.Duration) {
	r.t.Helper()
	began := time.Now()
	defer func() {
		r.t.Logf("in-sync replicas back to %d after %s", want, time.Since(began).Round(10*time.Millisecond))
	}()
	ok := faultkit.Wait(timeout, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		md, err := r.adm.Metadata(ctx, r.topic)
		if err != nil {
			return false
		}
		for _, p := range md.Topics[r.topic].Partitions {
			if len(p.ISR) < want {
				return false
			}
		}
		return true
	})
	if !ok {
		r.t.Fatalf("in-sync replicas of %s not back to %d within %s", r.topic, want, timeout)
	}
}

// relayLogged reports whether any relay's log contains s.
func (r *realRun) relayLogged(s string) bool {
	for _, p := range r.relays {
		if strings.Contains(p.Stderr(), s) {
			return true
		}
	}
	return false
}
