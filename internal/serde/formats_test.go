package serde_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/pgoutbox/outbox/internal/serde"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/kafka/format"
)

const userJSONSchema = `{
  "$schema": "http://json-schema.org/draft-07/schema#",
  "type": "object",
  "properties": {
    "id": {"type": "integer"},
    "name": {"type": "string", "minLength": 1},
    "address": {"type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}}}
  },
  "required": ["id", "name"],
  "additionalProperties": false
}`

func TestJSONSchemaValidatesAndFrames(t *testing.T) {
	reg := testenv.Registry(t)
	topic := testenv.TopicName(t)
	id, version := reg.Register(t, topic+"-value", sr.TypeJSON, userJSONSchema)
	enc := newEncoder(t, format.Config{Value: format.ValueJSONSchema, RegistryURL: reg.URL})
	payload := `{"id": 7, "name": "ada", "address": {"zip": "69001"}}`
	m := message(topic, "UserCreated", payload)
	if err := enc.Encode(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	if m.Value[0] != 0 || int(binary.BigEndian.Uint32(m.Value[1:5])) != id {
		t.Fatalf("header %x, want magic 0 and ID %d", m.Value[:5], id)
	}
	var got, want any
	if err := json.Unmarshal(m.Value[5:], &got); err != nil {
		t.Fatalf("body is not JSON: %v", err)
	}
	_ = json.Unmarshal([]byte(payload), &want)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("body %v, want %v", got, want)
	}
	for _, tc := range []struct{ payload, want string }{
		{`{"id": 7, "name": "ada", "address": {"zip": "6900"}}`, `field "address.zip": '6900' does not match pattern`},
		{`{"id": "7", "name": "ada"}`, `field "id": got string, want integer`},
		{`{"id": 7}`, `missing property 'name'`},
		{`{"id": 7, "name": "ada", "x": 1}`, `additional properties 'x' not allowed`},
	} {
		err := enc.Encode(context.Background(), message(topic, "UserCreated", tc.payload))
		if !errors.Is(err, serde.ErrSchema) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), topic+"-value") ||
			!strings.Contains(err.Error(), "version "+strconv.Itoa(version)) {
			t.Errorf("%s: got %v, want ErrSchema saying %q and naming the schema", tc.payload, err, tc.want)
		}
	}
}

const orderProto = `syntax = "proto3";
package acme;
import "google/protobuf/timestamp.proto";

message Envelope { string note = 1; }

message Order {
  int64 id = 1;
  string customer = 2;
  repeated Line lines = 3;
  google.protobuf.Timestamp placed_at = 4;
  message Line { string sku = 1; int32 qty = 2; }
}
`

func TestProtobufEncodesTheEventsMessage(t *testing.T) {
	reg := testenv.Registry(t)
	topic := testenv.TopicName(t)
	id, _ := reg.Register(t, topic+"-value", sr.TypeProtobuf, orderProto)
	enc := newEncoder(t, format.Config{Value: format.ValueProtobuf, RegistryURL: reg.URL})
	m := message(topic, "acme.Order", `{"id": "42", "customer": "ada", "lines": [{"sku": "A-1", "qty": 2}], "placedAt": "2026-12-04T10:00:00Z"}`)
	if err := enc.Encode(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	if m.Value[0] != 0 || int(binary.BigEndian.Uint32(m.Value[1:5])) != id {
		t.Fatalf("header %x, want magic 0 and ID %d", m.Value[:5], id)
	}
	// Message indexes: [1] (Order, the file's second message) is written
	// as count 1, index 1, zig-zag: 02 02.
	body := m.Value[5:]
	if body[0] != 2 || body[1] != 2 {
		t.Fatalf("message indexes %x, want 02 02", body[:2])
	}
	fields := wireFields(t, body[2:])
	if fields[1] != uint64(42) || string(fields[2].([]byte)) != "ada" {
		t.Fatalf("id %v, customer %q", fields[1], fields[2])
	}
	line := wireFields(t, fields[3].([]byte))
	if string(line[1].([]byte)) != "A-1" || line[2] != uint64(2) {
		t.Fatalf("line %v", line)
	}
	if ts := wireFields(t, fields[4].([]byte)); ts[1] != uint64(1796378400) {
		t.Fatalf("placed_at seconds %v", ts[1])
	}

	// The first message: index [0], a single 0.
	m = message(topic, "acme.Envelope", `{"note": "n"}`)
	if err := enc.Encode(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	if m.Value[5] != 0 || string(wireFields(t, m.Value[6:])[1].([]byte)) != "n" {
		t.Fatalf("first message: %x", m.Value[5:])
	}
	// A record name that names none of several messages is a fault, not
	// the first message it happens to fit.
	err := enc.Encode(context.Background(), message(topic, "OrderPlaced", `{"note": "n"}`))
	if !errors.Is(err, serde.ErrSchema) || !strings.Contains(err.Error(), `"OrderPlaced" names none of the schema's messages (acme.Envelope, acme.Order)`) {
		t.Fatalf("an unknown record name: %v", err)
	}
	// A nested message by its short name: indexes [1, 0].
	m = message(topic, "Line", `{"sku": "B", "qty": 1}`)
	if err := enc.Encode(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	if got := m.Value[5:8]; got[0] != 4 || got[1] != 2 || got[2] != 0 {
		t.Fatalf("nested message indexes %x, want 04 02 00", got)
	}

	err = enc.Encode(context.Background(), message(topic, "acme.Order", `{"id": "42", "coupon": "X"}`))
	if !errors.Is(err, serde.ErrSchema) || !strings.Contains(err.Error(), `unknown field "coupon"`) || !strings.Contains(err.Error(), "acme.Order") {
		t.Fatalf("an unknown field: %v", err)
	}
	err = enc.Encode(context.Background(), message(topic, "acme.Order", `{"id": "forty"}`))
	if !errors.Is(err, serde.ErrSchema) || !strings.Contains(err.Error(), "id") {
		t.Fatalf("a bad value: %v", err)
	}
}

// TestProtobufAnyHoldsTheSchemasOwnMessages: an Any names a message of
// the event's schema, or a well-known type.
func TestProtobufAnyHoldsTheSchemasOwnMessages(t *testing.T) {
	reg := testenv.Registry(t)
	topic := testenv.TopicName(t)
	reg.Register(t, topic+"-value", sr.TypeProtobuf, `syntax = "proto3"; package acme;
import "google/protobuf/any.proto";
message Order { string id = 1; google.protobuf.Any detail = 2; }
message Refund { string id = 1; }`)
	enc := newEncoder(t, format.Config{Value: format.ValueProtobuf, RegistryURL: reg.URL})
	for _, detail := range []string{`{"@type": "type.googleapis.com/acme.Refund", "id": "r"}`, `{"@type": "type.googleapis.com/google.protobuf.Duration", "value": "1s"}`} {
		m := message(topic, "acme.Order", `{"id": "o", "detail": `+detail+`}`)
		if err := enc.Encode(context.Background(), m); err != nil {
			t.Errorf("Any %s: %v", detail, err)
		}
	}
}

// wireFields parses one level of protobuf wire format with protowire, the
// way any decoder without the schema would: varints as uint64,
// length-delimited fields as bytes.
func wireFields(t *testing.T, b []byte) map[protowire.Number]any {
	t.Helper()
	out := map[protowire.Number]any{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatalf("bad tag: %v", protowire.ParseError(n))
		}
		b = b[n:]
		switch typ {
		case protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				t.Fatal(protowire.ParseError(n))
			}
			out[num], b = v, b[n:]
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				t.Fatal(protowire.ParseError(n))
			}
			out[num], b = v, b[n:]
		default:
			t.Fatalf("field %d: wire type %d", num, typ)
		}
	}
	return out
}

// TestJSONSchemaReferencesResolveByTheirNames: a $ref names a reference
// by a relative name, as Confluent's examples do, or an absolute one;
// either way the referenced subject's schema applies.
func TestJSONSchemaReferencesResolveByTheirNames(t *testing.T) {
	reg := testenv.Registry(t)
	topic := testenv.TopicName(t)
	_, av := reg.Register(t, topic+"-address", sr.TypeJSON, `{"type": "object", "properties": {"zip": {"type": "string"}}, "required": ["zip"]}`)
	for i, name := range []string{"address.json", "https://example.com/schemas/address.json"} {
		subject := topic + "-" + strconv.Itoa(i) + "-value"
		_, err := reg.Client.CreateSchema(context.Background(), subject, sr.Schema{Type: sr.TypeJSON,
			Schema:     `{"type": "object", "properties": {"ship_to": {"$ref": "` + name + `"}}, "required": ["ship_to"]}`,
			References: []sr.SchemaReference{{Name: name, Subject: topic + "-address", Version: av}}})
		if err != nil && strings.Contains(err.Error(), "not supported") {
			// Karapace 6.2 refuses references in JSON schemas.
			t.Skipf("the registry at %s: %v", reg.URL, err)
		}
		if err != nil {
			t.Fatal(err)
		}
		enc := newEncoder(t, format.Config{Value: format.ValueJSONSchema, RegistryURL: reg.URL})
		if err := enc.Encode(context.Background(), message(topic+"-"+strconv.Itoa(i), "X", `{"ship_to": {"zip": "69001"}}`)); err != nil {
			t.Errorf("%s: a payload that fits: %v", name, err)
		}
		for _, bad := range []string{`{"ship_to": {"zip": 69001}}`, `{"ship_to": {}}`} {
			err := enc.Encode(context.Background(), message(topic+"-"+strconv.Itoa(i), "X", bad))
			if !errors.Is(err, serde.ErrSchema) || !strings.Contains(err.Error(), "ship_to") {
				t.Errorf("%s: %s: got %v, want a fault in ship_to", name, bad, err)
			}
		}
	}
}
