package serde_test

import (
	"context"
	"encoding/binary"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/linkedin/goavro/v2"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/pgoutbox/outbox/internal/serde"
	"github.com/pgoutbox/outbox/internal/tcpproxy"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/kafka"
	"github.com/pgoutbox/outbox/kafka/format"
)

const userV1 = `{"type": "record", "name": "UserCreated", "namespace": "acme",
  "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}]}`

// userV2 adds an optional field: a backward-compatible evolution.
const userV2 = `{"type": "record", "name": "UserCreated", "namespace": "acme",
  "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"},
             {"name": "email", "type": ["null", "string"], "default": null}]}`

func newEncoder(t *testing.T, cfg format.Config) *serde.Encoder {
	t.Helper()
	if cfg.Value == "" {
		cfg.Value = format.ValueAvro
	}
	enc, err := serde.New(cfg, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	return enc
}

// decode reads a framed Avro value as an independent consumer does
// (testenv.TestRegistry.DecodeAvro).
func decode(t *testing.T, reg *testenv.TestRegistry, value []byte) (map[string]any, int) {
	t.Helper()
	native, id := reg.DecodeAvro(t, value)
	return native.(map[string]any), id
}

func message(topic, eventType, payload string) *kafka.Message {
	return &kafka.Message{Topic: topic, Key: []byte("agg-1"), Value: []byte(payload),
		Headers: []kafka.Header{{Key: "event_id", Value: []byte("e1")}, {Key: "event_type", Value: []byte(eventType)}}}
}

func TestEncodeFramesInTheSubjectsLatestSchema(t *testing.T) {
	reg := testenv.Registry(t)
	topic := testenv.TopicName(t)
	reg.Register(t, topic+"-value", sr.TypeAvro, userV1)
	id2, _ := reg.Register(t, topic+"-value", sr.TypeAvro, userV2)
	enc := newEncoder(t, format.Config{RegistryURL: reg.URL})
	m := message(topic, "UserCreated", `{"id": 7, "name": "ada", "email": "ada@example.com"}`)
	if err := enc.Encode(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	got, id := decode(t, reg, m.Value)
	if id != id2 {
		t.Fatalf("schema ID %d, want the latest version's %d", id, id2)
	}
	if got["id"] != int64(7) || got["name"] != "ada" || got["email"].(map[string]any)["string"] != "ada@example.com" {
		t.Fatalf("decoded %v", got)
	}
	if err := enc.Ping(context.Background()); err != nil {
		t.Fatalf("ping: %v", err)
	}
	// A second event comes from the cache.
	if err := enc.Encode(context.Background(), message(topic, "UserCreated", `{"id": 8, "name": "bo"}`)); err != nil {
		t.Fatal(err)
	}
	if requests, hits, _ := enc.Stats(); requests != 1 || hits != 1 {
		t.Fatalf("requests %d, hits %d: want 1 and 1", requests, hits)
	}
}

func TestSubjectStrategies(t *testing.T) {
	reg := testenv.Registry(t)
	topic := testenv.TopicName(t)
	record := "acme.UserCreated" + strings.ReplaceAll(topic, "-", "_")
	idRecord, _ := reg.Register(t, record, sr.TypeAvro, userV1)
	idTopicRecord, _ := reg.Register(t, topic+"-"+record, sr.TypeAvro, userV2)
	for _, tc := range []struct {
		strategy format.SubjectStrategy
		want     int
	}{{format.SubjectRecord, idRecord}, {format.SubjectTopicRecord, idTopicRecord}} {
		enc := newEncoder(t, format.Config{RegistryURL: reg.URL, SubjectStrategy: tc.strategy})
		m := message(topic, record, `{"id": 1, "name": "x"}`)
		if err := enc.Encode(context.Background(), m); err != nil {
			t.Fatalf("%s: %v", tc.strategy, err)
		}
		if _, id := decode(t, reg, m.Value); id != tc.want {
			t.Fatalf("%s: schema ID %d, want %d", tc.strategy, id, tc.want)
		}
		m = message(topic, "", `{"id": 1, "name": "x"}`)
		err := enc.Encode(context.Background(), m)
		if !errors.Is(err, serde.ErrSchema) || !strings.Contains(err.Error(), `header "event_type" is missing or empty`) {
			t.Fatalf("%s without a record name: %v, want ErrSchema naming the header", tc.strategy, err)
		}
	}
}

func TestAFaultNamesTheFieldAndTheSchema(t *testing.T) {
	reg := testenv.Registry(t)
	topic := testenv.TopicName(t)
	id, version := reg.Register(t, topic+"-value", sr.TypeAvro, userV1)
	enc := newEncoder(t, format.Config{RegistryURL: reg.URL})
	m := message(topic, "UserCreated", `{"id": "seven", "name": "ada"}`)
	err := enc.Encode(context.Background(), m)
	if !errors.Is(err, serde.ErrSchema) {
		t.Fatalf("got %v, want ErrSchema", err)
	}
	for _, want := range []string{`field "id": want an integer, got string "seven"`, topic + "-value", "version " + strconv.Itoa(version), "schema ID " + strconv.Itoa(id)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	if string(m.Value) != `{"id": "seven", "name": "ada"}` {
		t.Fatalf("a failed encoding changed the value: %q", m.Value)
	}
	if _, _, faults := enc.Stats(); faults != 1 {
		t.Fatalf("faults %d, want 1", faults)
	}
}

// TestAMissingSubjectIsAnOutageUntilItIsRegistered: no dead letter, and
// the event encodes once the pipeline registers the schema.
func TestAMissingSubjectIsAnOutageUntilItIsRegistered(t *testing.T) {
	reg := testenv.Registry(t)
	topic := testenv.TopicName(t)
	enc := newEncoder(t, format.Config{RegistryURL: reg.URL})
	err := enc.Encode(context.Background(), message(topic, "UserCreated", `{"id": 1, "name": "x"}`))
	if !errors.Is(err, serde.ErrNoSubject) || errors.Is(err, serde.ErrSchema) || !strings.Contains(err.Error(), topic+"-value") {
		t.Fatalf("got %v, want ErrNoSubject naming the subject", err)
	}
	reg.Register(t, topic+"-value", sr.TypeAvro, userV1)
	deadline := time.Now().Add(30 * time.Second)
	for {
		err = enc.Encode(context.Background(), message(topic, "UserCreated", `{"id": 1, "name": "x"}`))
		if err == nil {
			break
		}
		if !errors.Is(err, serde.ErrNoSubject) || time.Now().After(deadline) {
			t.Fatalf("after registering: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestARegistryThatIsDownStopsOnlyWhatIsNotCached: a cached subject goes
// on encoding; an uncached one is an outage; both recover.
func TestARegistryThatIsDownStopsOnlyWhatIsNotCached(t *testing.T) {
	reg := testenv.Registry(t)
	topic := testenv.TopicName(t)
	reg.Register(t, topic+"-value", sr.TypeAvro, userV1)
	other := topic + "-other"
	reg.Register(t, other+"-value", sr.TypeAvro, userV1)
	proxy, err := tcpproxy.New(strings.TrimPrefix(strings.TrimPrefix(reg.URL, "http://"), "https://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	enc := newEncoder(t, format.Config{RegistryURL: "http://" + proxy.Addr(), RegistryTimeout: 2 * time.Second})
	ctx := context.Background()
	if err := enc.Encode(ctx, message(topic, "UserCreated", `{"id": 1, "name": "x"}`)); err != nil {
		t.Fatal(err)
	}
	proxy.Refuse()
	proxy.Cut()
	if err := enc.Encode(ctx, message(topic, "UserCreated", `{"id": 2, "name": "y"}`)); err != nil {
		t.Fatalf("a cached subject while the registry is down: %v", err)
	}
	err = enc.Encode(ctx, message(other, "UserCreated", `{"id": 3, "name": "z"}`))
	if !errors.Is(err, serde.ErrRegistry) || !strings.Contains(err.Error(), proxy.Addr()) {
		t.Fatalf("an uncached subject while the registry is down: %v, want ErrRegistry naming it", err)
	}
	if err := enc.Ping(ctx); !errors.Is(err, serde.ErrRegistry) {
		t.Fatalf("ping while down: %v", err)
	}
	proxy.Restore()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err = enc.Encode(ctx, message(other, "UserCreated", `{"id": 3, "name": "z"}`))
		if err == nil {
			break
		}
		if !errors.Is(err, serde.ErrRegistry) || time.Now().After(deadline) {
			t.Fatalf("after the registry came back: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestRefusedCredentialsAreNamed(t *testing.T) {
	reg := testenv.RegistryWithAuth(t, "relay", "right")
	topic := testenv.TopicName(t)
	reg.Register(t, topic+"-value", sr.TypeAvro, userV1)
	good := newEncoder(t, format.Config{RegistryURL: reg.URL, RegistryUsername: "relay", RegistryPassword: "right"})
	if err := good.Encode(context.Background(), message(topic, "UserCreated", `{"id": 1, "name": "x"}`)); err != nil {
		t.Fatalf("with the right credentials: %v", err)
	}
	bad := newEncoder(t, format.Config{RegistryURL: reg.URL, RegistryUsername: "relay", RegistryPassword: "wrong"})
	err := bad.Ping(context.Background())
	if !errors.Is(err, serde.ErrRegistry) || !strings.Contains(err.Error(), "refused the credentials") {
		t.Fatalf("ping with wrong credentials: %v", err)
	}
	err = bad.Encode(context.Background(), message(topic, "UserCreated", `{"id": 1, "name": "x"}`))
	if !errors.Is(err, serde.ErrRegistry) || errors.Is(err, serde.ErrSchema) {
		t.Fatalf("encode with wrong credentials: %v, want an outage", err)
	}
}

// TestANewVersionIsUsed: registered mid-run, a version is used by the
// next background refresh, and at once by an event that fits it only.
func TestANewVersionIsUsed(t *testing.T) {
	reg := testenv.Registry(t)
	topic := testenv.TopicName(t)
	id1, _ := reg.Register(t, topic+"-value", sr.TypeAvro, userV1)
	enc := newEncoder(t, format.Config{RegistryURL: reg.URL, SchemaRefresh: time.Hour})
	ctx := context.Background()
	m := message(topic, "UserCreated", `{"id": 1, "name": "x"}`)
	if err := enc.Encode(ctx, m); err != nil {
		t.Fatal(err)
	}
	id2, _ := reg.Register(t, topic+"-value", sr.TypeAvro, userV2)
	// Written for version 2, before any refresh: the encoder asks again.
	m = message(topic, "UserCreated", `{"id": 2, "name": "y", "email": "y@example.com"}`)
	if err := enc.Encode(ctx, m); err != nil {
		t.Fatalf("an event for the new version: %v", err)
	}
	if _, id := decode(t, reg, m.Value); id != id2 {
		t.Fatalf("schema ID %d, want %d (version 2; version 1 is %d)", id, id2, id1)
	}

	pinned := newEncoder(t, format.Config{RegistryURL: reg.URL, SchemaVersion: 1})
	m = message(topic, "UserCreated", `{"id": 3, "name": "z"}`)
	if err := pinned.Encode(ctx, m); err != nil {
		t.Fatal(err)
	}
	if _, id := decode(t, reg, m.Value); id != id1 {
		t.Fatalf("pinned to version 1: schema ID %d, want %d", id, id1)
	}

	refreshing := newEncoder(t, format.Config{RegistryURL: reg.URL, SchemaRefresh: format.MinSchemaRefresh})
	if err := refreshing.Encode(ctx, message(topic, "UserCreated", `{"id": 4, "name": "w"}`)); err != nil {
		t.Fatal(err)
	}
	schema := `{"type": "record", "name": "UserCreated", "namespace": "acme",
	  "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"},
	             {"name": "email", "type": ["null", "string"], "default": null},
	             {"name": "tier", "type": "string", "default": "free"}]}`
	id3, _ := reg.Register(t, topic+"-value", sr.TypeAvro, schema)
	deadline := time.Now().Add(30 * time.Second)
	for {
		m = message(topic, "UserCreated", `{"id": 5, "name": "v"}`)
		if err := refreshing.Encode(ctx, m); err != nil {
			t.Fatal(err)
		}
		if _, id := decode(t, reg, m.Value); id == id3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("version 3 (ID %d) not in use 30s after it was registered", id3)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReferencesAreResolved: a schema that uses a named type of another
// subject (a schema reference).
func TestReferencesAreResolved(t *testing.T) {
	reg := testenv.Registry(t)
	topic := testenv.TopicName(t)
	addr := `{"type": "record", "name": "Address", "namespace": "acme", "fields": [{"name": "city", "type": "string"}]}`
	_, av := reg.Register(t, topic+"-address", sr.TypeAvro, addr)
	order := `{"type": "record", "name": "Order", "namespace": "acme", "fields": [{"name": "ship_to", "type": "acme.Address"}]}`
	ss, err := reg.Client.CreateSchema(context.Background(), topic+"-value", sr.Schema{Schema: order, Type: sr.TypeAvro,
		References: []sr.SchemaReference{{Name: "acme.Address", Subject: topic + "-address", Version: av}}})
	if err != nil {
		t.Fatal(err)
	}
	enc := newEncoder(t, format.Config{RegistryURL: reg.URL})
	m := message(topic, "Order", `{"ship_to": {"city": "Lyon"}}`)
	if err := enc.Encode(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	if binary.BigEndian.Uint32(m.Value[1:5]) != uint32(ss.ID) {
		t.Fatalf("schema ID %d, want %d", binary.BigEndian.Uint32(m.Value[1:5]), ss.ID)
	}
	full := `{"type": "record", "name": "Order", "namespace": "acme", "fields": [{"name": "ship_to", "type": ` + addr + `}]}`
	codec, err := goavro.NewCodec(full)
	if err != nil {
		t.Fatal(err)
	}
	native, _, err := codec.NativeFromBinary(m.Value[5:])
	if err != nil {
		t.Fatal(err)
	}
	if city := native.(map[string]any)["ship_to"].(map[string]any)["city"]; city != "Lyon" {
		t.Fatalf("city %v", city)
	}
}

// TestATombstoneStaysNull: a NULL payload is a Kafka null value in every
// format, as Confluent's serializers leave it, not a fault.
func TestATombstoneStaysNull(t *testing.T) {
	reg := testenv.Registry(t)
	topic := testenv.TopicName(t)
	enc := newEncoder(t, format.Config{RegistryURL: reg.URL, CloudEvents: true})
	m := message(topic, "UserCreated", "")
	m.Value = nil
	if err := enc.Encode(context.Background(), m); err != nil || m.Value != nil || len(m.Headers) != 2 {
		t.Fatalf("a tombstone: err %v, value %q, headers %v", err, m.Value, m.Headers)
	}
}

// TestAnEventForANewVersionWaitsForADownRegistry: an event that does not
// fit the cached version while the registry cannot be asked for a newer
// one is an outage, never a fault; it encodes once the registry answers.
func TestAnEventForANewVersionWaitsForADownRegistry(t *testing.T) {
	reg := testenv.Registry(t)
	topic := testenv.TopicName(t)
	reg.Register(t, topic+"-value", sr.TypeAvro, userV1)
	proxy, err := tcpproxy.New(strings.TrimPrefix(reg.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	enc := newEncoder(t, format.Config{RegistryURL: "http://" + proxy.Addr(), RegistryTimeout: time.Second, SchemaRefresh: time.Hour})
	ctx := context.Background()
	if err := enc.Encode(ctx, message(topic, "UserCreated", `{"id": 1, "name": "x"}`)); err != nil {
		t.Fatal(err)
	}
	id2, _ := reg.Register(t, topic+"-value", sr.TypeAvro, userV2)
	proxy.Refuse()
	proxy.Cut()
	session := enc.Session()
	for i := 0; i < 2; i++ {
		err = session(ctx, message(topic, "UserCreated", `{"id": 2, "name": "y", "email": "y@example.com"}`))
		if !errors.Is(err, serde.ErrRegistry) || errors.Is(err, serde.ErrSchema) || !strings.Contains(err.Error(), "could not be read") {
			t.Fatalf("event %d for version 2 while the registry is down: %v, want ErrRegistry", i, err)
		}
	}
	if _, _, faults := enc.Stats(); faults != 0 {
		t.Fatalf("%d faults counted for events that may fit", faults)
	}
	proxy.Restore()
	m := message(topic, "UserCreated", `{"id": 2, "name": "y", "email": "y@example.com"}`)
	if err := enc.Session()(ctx, m); err != nil {
		t.Fatalf("after the registry came back: %v", err)
	}
	if _, id := decode(t, reg, m.Value); id != id2 {
		t.Fatalf("schema ID %d, want %d", id, id2)
	}
}
