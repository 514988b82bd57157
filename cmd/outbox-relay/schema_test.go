package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/pgoutbox/outbox/internal/testenv"
)

// TestStatusAndInspectNameSchemaFaults: `run --value-format avro`
// dead-letters an event whose payload does not fit its schema; status
// counts it as a schema fault, and inspect shows its subject, the schema
// and why it does not fit, then that it fits a version registered since.
func TestStatusAndInspectNameSchemaFaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	topic := k.Topic(t, 1)
	reg := testenv.Registry(t)
	id1, _ := reg.Register(t, topic+"-value", sr.TypeAvro,
		`{"type": "record", "name": "Paid", "fields": [{"name": "amount", "type": "long"}]}`)
	good, bad := uuid.New(), uuid.New()
	for id, payload := range map[uuid.UUID]string{good: `{"amount": 12}`, bad: `{"amount": "twelve"}`} {
		if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload) VALUES ($1, $2, 'paid', $3)`, id, id.String(), payload); err != nil {
			t.Fatal(err)
		}
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan int, 1)
	var stderr bytes.Buffer
	go func() {
		var stdout bytes.Buffer
		done <- Main(rctx, []string{"run", "--database-url", db.ConnString, "--brokers", k.Brokers[0], "--topic", topic,
			"--value-format", "avro", "--schema-registry-url", reg.URL, "--metrics-addr", "", "--startup-wait", "10s"}, &stdout, &stderr)
	}()
	settled := func() bool {
		var dead, published bool
		err := db.Pool.QueryRow(ctx, `SELECT (SELECT dead_lettered_at IS NOT NULL FROM outbox WHERE id = $1), (SELECT published_at IS NOT NULL FROM outbox WHERE id = $2)`, bad, good).Scan(&dead, &published)
		return err == nil && dead && published
	}
	for deadline := time.Now().Add(30 * time.Second); !settled(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("not dead-lettered and published after 30 s; the relay said:\n%s", stderr.String())
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("run: exit %d: %s", code, stderr.String())
	}

	code, out, errOut := runMain(t, ctx, "status", "--database-url", db.ConnString, "--json")
	var st statusReport
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 0 || st.DeadLetters != 1 || st.DeadLettersSchema != 1 {
		t.Fatalf("status: exit %d, dead letters %d, schema faults %d: %s %s", code, st.DeadLetters, st.DeadLettersSchema, out, errOut)
	}
	if _, out, _ = runMain(t, ctx, "status", "--database-url", db.ConnString); !strings.Contains(out, "schema faults") {
		t.Errorf("status does not count schema faults:\n%s", out)
	}

	inspect := func(args ...string) eventReport {
		t.Helper()
		code, out, errOut := runMain(t, ctx, append([]string{"inspect", "--database-url", db.ConnString, "--event-id", bad.String(), "--json",
			"--value-format", "avro", "--schema-registry-url", reg.URL}, args...)...)
		var r eventReport
		if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 || r.Schema == nil {
			t.Fatalf("inspect: exit %d: %s %s", code, out, errOut)
		}
		return r
	}
	r := inspect("--topic", topic)
	if s := r.Schema; s.Subject != topic+"-value" || s.ID != id1 || s.Version != 1 || s.Fits || !strings.Contains(s.Error, `field "amount": want an integer, got string "twelve"`) {
		t.Fatalf("inspect's schema: %+v", s)
	}
	_, out, _ = runMain(t, ctx, "inspect", "--database-url", db.ConnString, "--event-id", bad.String(), "--topic", topic,
		"--value-format", "avro", "--schema-registry-url", reg.URL)
	line := `(?m)^  schema +` + regexp.QuoteMeta(`subject `+topic+`-value, version 1, schema ID `+strconv.Itoa(id1)+`: event does not fit its schema: field "amount": want an integer, got string "twelve"`) + `$`
	if !regexp.MustCompile(line).MatchString(out) {
		t.Errorf("inspect's text does not match %s:\n%s", line, out)
	}
	if r := inspect(); r.Schema.Fits || !strings.Contains(r.Schema.Error, "give inspect the relay's --topic") {
		t.Fatalf("inspect without --topic: %+v", r.Schema)
	}
	id2, _ := reg.Register(t, topic+"-value", sr.TypeAvro,
		`{"type": "record", "name": "Paid", "fields": [{"name": "amount", "type": ["long", "string"]}]}`)
	if s := inspect("--topic", topic).Schema; !s.Fits || s.ID != id2 || s.Version != 2 {
		t.Fatalf("inspect after a version it fits: %+v", s)
	}
	_, out, _ = runMain(t, ctx, "inspect", "--database-url", db.ConnString, "--event-id", bad.String(), "--topic", topic,
		"--value-format", "avro", "--schema-registry-url", reg.URL)
	if !strings.Contains(out, "subject "+topic+"-value, version 2") || !strings.Contains(out, "the payload fits") {
		t.Errorf("inspect's text:\n%s", out)
	}
}

// TestRunWithRefusedRegistryCredentials: a registry that refuses the
// relay's credentials is named at start and is an outage: the event waits
// without an attempt counted, and is published once the relay runs with
// the right password.
func TestRunWithRefusedRegistryCredentials(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	topic := k.Topic(t, 1)
	reg := testenv.RegistryWithAuth(t, "relay", "right")
	reg.Register(t, topic+"-value", sr.TypeAvro, `{"type": "record", "name": "Paid", "fields": [{"name": "amount", "type": "long"}]}`)
	id := uuid.New()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload) VALUES ($1, 'a', 'paid', '{"amount": 1}')`, id); err != nil {
		t.Fatal(err)
	}
	run := func(password string, until func(stderr string) bool) string {
		t.Helper()
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan int, 1)
		stderr := &testenv.SyncBuffer{}
		go func() {
			var stdout bytes.Buffer
			done <- Main(rctx, []string{"run", "--database-url", db.ConnString, "--brokers", k.Brokers[0], "--topic", topic, "--log-format", "console",
				"--value-format", "avro", "--schema-registry-url", reg.URL, "--schema-registry-username", "relay", "--schema-registry-password", password,
				"--retry-min", "100ms", "--metrics-addr", "", "--startup-wait", "10s"}, &stdout, stderr)
		}()
		for deadline := time.Now().Add(30 * time.Second); !until(stderr.String()); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				cancel()
				<-done
				t.Fatalf("with password %q: not done after 30 s; the relay said:\n%s", password, stderr.String())
			}
		}
		cancel()
		if code := <-done; code != 0 {
			t.Fatalf("run: exit %d: %s", code, stderr.String())
		}
		return stderr.String()
	}
	// The publish's outage line says the event was tried.
	out := run("wrong", func(s string) bool { return strings.Contains(s, "Schema Registry outage: publishes fail") })
	if !strings.Contains(out, "refused the credentials") || !strings.Contains(out, reg.URL) {
		t.Errorf("the refusal is not named:\n%s", out)
	}
	var attempts int
	var dead, published *time.Time
	if err := db.Pool.QueryRow(ctx, `SELECT attempts, dead_lettered_at, published_at FROM outbox WHERE id = $1`, id).Scan(&attempts, &dead, &published); err != nil {
		t.Fatal(err)
	}
	if attempts != 0 || dead != nil || published != nil {
		t.Fatalf("after the refusal: attempts %d, dead_lettered_at %v, published_at %v: want a waiting event", attempts, dead, published)
	}
	run("right", func(string) bool {
		var n int
		return db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE id = $1 AND published_at IS NOT NULL`, id).Scan(&n) == nil && n == 1
	})
}
