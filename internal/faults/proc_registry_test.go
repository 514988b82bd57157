package faults

// The Schema Registry formats (--value-format avro) under the faults a
// registry has: down for 30 s while writers go on at 500 events/s and
// three relays run, none of which has a schema cached. An outage, never
// an event's fault: nothing is dead-lettered, no attempt is counted,
// /readyz names the registry, and once it answers every event is
// published in order, each record decoding (linkedin/goavro, by the
// schema ID in its header) to the payload written.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/pgoutbox/outbox/internal/checker"
	"github.com/pgoutbox/outbox/internal/faultkit"
	"github.com/pgoutbox/outbox/internal/tcpproxy"
	"github.com/pgoutbox/outbox/internal/testenv"
)

// loadSchema is the Avro schema of the fault tests' payloads
// (faultkit.EventPayload).
const loadSchema = `{"type": "record", "name": "FaultEvent", "namespace": "pgoutbox.test",
  "fields": [{"name": "n", "type": "long"}, {"name": "aggregate", "type": "string"}, {"name": "pad", "type": "string"}]}`

// decodeAvro replaces each observed value, Confluent-framed Avro, with
// its JSON, decoded as an independent consumer does
// (testenv.TestRegistry.DecodeAvro).
func decodeAvro(t testing.TB, reg *testenv.TestRegistry, obs []checker.Observed) {
	t.Helper()
	for i := range obs {
		native, _ := reg.DecodeAvro(t, obs[i].Value)
		var err error
		if obs[i].Value, err = json.Marshal(native); err != nil {
			t.Fatal(err)
		}
	}
}

func TestProcRegistryDown30sWithThreeRelays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	topic := k.Topic(t, 6)
	reg := testenv.Registry(t)
	reg.Register(t, topic+"-value", sr.TypeAvro, loadSchema)
	proxy, err := tcpproxy.New(strings.TrimPrefix(reg.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	proxy.Refuse()
	args := []string{"--value-format", "avro", "--schema-registry-url", "http://" + proxy.Addr(), "--schema-registry-timeout", "1s",
		"--retry-min", "100ms", "--retry-max", "1s"}
	r0, addr := readinessRelay(t, db.ConnString, k.Brokers, topic, append([]string{"--relay-id", "r0"}, args...)...)
	for i := 1; i < 3; i++ {
		startRelayProc(t, db.ConnString, k.Brokers, topic, append([]string{"--relay-id", fmt.Sprintf("r%d", i)}, args...)...).WaitReady(60 * time.Second)
	}
	r := waitReadyz(t, addr, 20*time.Second, "failing on the registry check", failing("registry"))
	if d := r.Checks["registry"].Detail; !strings.Contains(d, proxy.Addr()) {
		t.Errorf("registry check %q does not name the registry", d)
	}

	load := ipStartRateLoad(t, db.Pool, writer(t, db.Pool), "agg", 500, 1, 100, 4)
	began := time.Now()
	// The fault lasts 30 s from the first event written.
	for time.Since(began) < 30*time.Second {
		time.Sleep(time.Second)
		if n := faultkit.Count(t, db.Pool, "SELECT count(*) FROM outbox WHERE attempts > 0 OR dead_lettered_at IS NOT NULL"); n > 0 {
			t.Fatalf("%d events had an attempt counted or were dead-lettered while the registry was down", n)
		}
	}
	if n := ipPublished(t, db.Pool); n != 0 {
		t.Fatalf("%d events published without the registry", n)
	}
	written := ipUnpublished(t, db.Pool)
	proxy.Restore()
	restored := time.Now()
	testenv.Eventually(t, 20*time.Second, func() bool { return ipPublished(t, db.Pool) > 0 }, "publishing did not resume within 20 s of the registry's return")
	resumed := time.Since(restored)
	testenv.Eventually(t, 60*time.Second, func() bool { return ipUnpublished(t, db.Pool) < 2000 }, "the backlog was not published within 60 s")
	drained := time.Since(restored)
	waitReadyz(t, addr, 20*time.Second, "ready after the registry came back", ready)
	load.Stop()
	testenv.Eventually(t, 60*time.Second, func() bool { return ipUnpublished(t, db.Pool) == 0 }, "backlog not drained")
	t.Logf("registry down 30 s: %d events waited; publishing resumed %s and the backlog was down to < 2,000 %s after its return",
		written, resumed.Round(10*time.Millisecond), drained.Round(10*time.Millisecond))

	exp, err := checker.ExpectedFromTable(ctx, db.Pool, "outbox")
	if err != nil {
		t.Fatal(err)
	}
	obs, err := checker.ObserveTopic(ctx, k.Brokers, topic, len(exp), 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	decodeAvro(t, reg, obs)
	rep := checker.Check(exp, obs)
	matrixRow(t, "schema registry down 30s, 3 relays", rep)
	if !rep.OK() {
		t.Errorf("checker: %v", rep)
	}
	if n := faultkit.Count(t, db.Pool, "SELECT count(*) FROM outbox WHERE attempts > 0 OR dead_lettered_at IS NOT NULL"); n > 0 {
		t.Errorf("%d events had an attempt counted or were dead-lettered", n)
	}
	// One line when the outage was found (at start), one when it ended.
	for _, line := range []string{"schema registry unavailable: events whose schema is not cached wait", "schema registry answers again", "Schema Registry outage: publishes fail"} {
		if n := countLines(r0, line); n != 1 {
			t.Errorf("r0 logged %q %d times, want once:\n%s", line, n, tail(r0.Stderr(), 3000))
		}
	}
}
