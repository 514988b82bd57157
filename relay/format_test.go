package relay_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/kafka/format"
	"github.com/pgoutbox/outbox/relay"
)

// counterV1 is the Avro schema of the events here; counterV2 adds an
// optional field.
const (
	counterV1 = `{"type": "record", "name": "Counted", "namespace": "test",
	  "fields": [{"name": "agg", "type": "string"}, {"name": "n", "type": "long"}]}`
	counterV2 = `{"type": "record", "name": "Counted", "namespace": "test",
	  "fields": [{"name": "agg", "type": "string"}, {"name": "n", "type": "long"},
	             {"name": "note", "type": ["null", "string"], "default": null}]}`
)

// avroRecord decodes a record's value (testenv.TestRegistry.DecodeAvro).
func avroRecord(t *testing.T, reg *testenv.TestRegistry, v []byte) (map[string]any, int) {
	t.Helper()
	native, id := reg.DecodeAvro(t, v)
	return native.(map[string]any), id
}

// TestAvroEventsArePublishedFramedAndABadOneIsDeadLettered: every event
// reaches a real broker in Avro behind the Confluent framing, with the
// CloudEvents headers, decoding field by field to its payload, in order
// per aggregate; the one event whose payload does not fit is
// dead-lettered at once, named, its aggregate's later event held, and the
// other aggregates and the rest of its batch flow. A version registered
// mid-run is used for the events written for it.
func TestAvroEventsArePublishedFramedAndABadOneIsDeadLettered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	topic := k.Topic(t, 3)
	reg := testenv.Registry(t)
	id1, v1 := reg.Register(t, topic+"-value", sr.TypeAvro, counterV1)

	var evs []outbox.Event
	for n := 1; n <= 5; n++ {
		for _, agg := range []string{"A", "B", "C"} {
			e := event(agg, n)
			if agg == "B" && n == 3 {
				e.Payload = json.RawMessage(`{"agg":"B","n":"three"}`)
			}
			evs = append(evs, e)
		}
	}
	addTx(t, db, nil, evs...)
	h := startRelay(t, db, k, topic, opts{relay: relay.Config{
		Format: format.Config{Value: format.ValueAvro, RegistryURL: reg.URL, CloudEvents: true, CloudEventsSource: "/shop/orders"},
	}})
	bad := evs[7] // B3
	// A1-5, C1-5, B1-2: 12 records; B3 is dead-lettered, B4 and B5 held.
	recs := k.Consume(t, topic, 12, 30*time.Second)
	testenv.Eventually(t, 20*time.Second, func() bool { return h.relay.Stats().DeadLettered == 1 }, "the bad event was not dead-lettered")
	var attempts int
	var lastErr string
	var dead *time.Time
	if err := db.Pool.QueryRow(ctx, "SELECT dead_lettered_at, attempts, last_error FROM outbox WHERE id = $1", bad.ID).Scan(&dead, &attempts, &lastErr); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`field "n": want an integer, got string "three"`, topic + "-value", "version " + strconv.Itoa(v1), "schema ID " + strconv.Itoa(id1)} {
		if !strings.Contains(lastErr, want) {
			t.Errorf("last_error %q does not say %q", lastErr, want)
		}
	}
	if dead == nil || attempts != 1 {
		t.Errorf("dead_lettered_at %v, attempts %d: want dead-lettered at the first attempt", dead, attempts)
	}

	written := map[string]outbox.Event{}
	for _, e := range evs {
		written[e.ID.String()] = e
	}
	last := map[string]int64{}
	for _, r := range recs {
		e, ok := written[r.Headers["event_id"]]
		if !ok {
			t.Fatalf("record of unknown event %q", r.Headers["event_id"])
		}
		got, id := avroRecord(t, reg, r.Value)
		var want map[string]any
		_ = json.Unmarshal(e.Payload, &want)
		if id != id1 || got["agg"] != want["agg"] || got["n"] != int64(want["n"].(float64)) {
			t.Errorf("event %s: decoded %v with schema %d, want %v with %d", e.ID, got, id, want, id1)
		}
		if n := got["n"].(int64); n <= last[e.AggregateID] {
			t.Errorf("aggregate %s: event %d after %d", e.AggregateID, n, last[e.AggregateID])
		} else {
			last[e.AggregateID] = n
		}
		ce := map[string]string{"ce_specversion": "1.0", "ce_id": e.ID.String(), "ce_type": "test.event", "ce_source": "/shop/orders",
			"ce_subject": e.AggregateID, "content-type": "application/avro", "ce_dataschema": reg.URL + "/schemas/ids/" + strconv.Itoa(id1)}
		for k, v := range ce {
			if r.Headers[k] != v {
				t.Errorf("event %s: header %s = %q, want %q", e.ID, k, r.Headers[k], v)
			}
		}
		if ts, err := time.Parse(time.RFC3339Nano, r.Headers["ce_time"]); err != nil || time.Since(ts) > time.Hour || time.Since(ts) < 0 {
			t.Errorf("event %s: ce_time %q", e.ID, r.Headers["ce_time"])
		}
	}
	if last["A"] != 5 || last["C"] != 5 || last["B"] != 2 {
		t.Fatalf("last event per aggregate %v, want A 5, B 2 (B3 dead, B4-5 held), C 5", last)
	}

	// The schema evolves: version 2 is registered, and an event written
	// for it (with the new field) goes out in it at once.
	id2, _ := reg.Register(t, topic+"-value", sr.TypeAvro, counterV2)
	e := outbox.Event{ID: outbox.NewID(), AggregateID: "C", Type: "test.event", Payload: json.RawMessage(`{"agg":"C","n":6,"note":"v2"}`)}
	addTx(t, db, nil, e)
	rec := k.Consume(t, topic, 13, 30*time.Second)[12]
	got, id := avroRecord(t, reg, rec.Value)
	if rec.Headers["event_id"] != e.ID.String() || id != id2 || got["note"].(map[string]any)["string"] != "v2" {
		t.Fatalf("after the new version: event %s decoded %v with schema %d, want %s with %d", rec.Headers["event_id"], got, id, e.ID, id2)
	}
	if d := h.relay.Stats().DeadLettered; d != 1 {
		t.Fatalf("%d dead letters, want 1", d)
	}
}

// TestProtobufAndJSONSchemaEventsArePublishedFramed: the other two
// registry formats through a real broker, each record decoded without the
// encoder's code (protowire field by field; encoding/json).
func TestProtobufAndJSONSchemaEventsArePublishedFramed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		value  format.Value
		typ    sr.SchemaType
		schema string
	}{
		{format.ValueProtobuf, sr.TypeProtobuf, `syntax = "proto3"; package test; message Counted { string agg = 1; int64 n = 2; }`},
		{format.ValueJSONSchema, sr.TypeJSON, `{"type": "object", "properties": {"agg": {"type": "string"}, "n": {"type": "integer", "minimum": 1}}, "required": ["agg", "n"], "additionalProperties": false}`},
	} {
		t.Run(string(tc.value), func(t *testing.T) {
			t.Parallel()
			db := testenv.MigratedDB(t)
			k := testenv.Kafka(t)
			topic := k.Topic(t, 3)
			reg := testenv.Registry(t)
			id, _ := reg.Register(t, topic+"-value", tc.typ, tc.schema)
			var evs []outbox.Event
			for n := 1; n <= 20; n++ {
				evs = append(evs, event(fmt.Sprintf("agg-%d", n%4), n))
			}
			addTx(t, db, nil, evs...)
			startRelay(t, db, k, topic, opts{relay: relay.Config{Format: format.Config{Value: tc.value, RegistryURL: reg.URL}}})
			recs := k.Consume(t, topic, len(evs), 30*time.Second)
			written := map[string]outbox.Event{}
			for _, e := range evs {
				written[e.ID.String()] = e
			}
			for _, r := range recs {
				e := written[r.Headers["event_id"]]
				if len(r.Value) < 5 || r.Value[0] != 0 || int(binary.BigEndian.Uint32(r.Value[1:5])) != id {
					t.Fatalf("event %s: value %x is not framed with schema ID %d", e.ID, r.Value, id)
				}
				var want struct {
					Agg string `json:"agg"`
					N   int64  `json:"n"`
				}
				_ = json.Unmarshal(e.Payload, &want)
				got := want
				if tc.value == format.ValueProtobuf {
					got = decodeCounted(t, r.Value[5:])
				} else if err := json.Unmarshal(r.Value[5:], &got); err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Errorf("event %s: decoded %+v, want %+v", e.ID, got, want)
				}
			}
		})
	}
}

// decodeCounted reads test.Counted (index [0], then field 1 a string,
// field 2 a varint) with protowire.
func decodeCounted(t *testing.T, b []byte) (c struct {
	Agg string `json:"agg"`
	N   int64  `json:"n"`
}) {
	t.Helper()
	if b[0] != 0 {
		t.Fatalf("message indexes %x, want 00", b[0])
	}
	for b = b[1:]; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			c.Agg, b = string(v), b[n:]
		case num == 2 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			c.N, b = int64(v), b[n:]
		default:
			t.Fatalf("field %d wire type %d", num, typ)
		}
	}
	return c
}
