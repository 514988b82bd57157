package serde

import (
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/linkedin/goavro/v2"
)

// orderSchema uses every Avro type the codec writes.
const orderSchema = `{
  "type": "record", "name": "OrderPlaced", "namespace": "shop",
  "fields": [
    {"name": "id", "type": "long"},
    {"name": "customer", "type": "string"},
    {"name": "note", "type": ["null", "string"], "default": null},
    {"name": "total", "type": "double"},
    {"name": "weight", "type": "float"},
    {"name": "paid", "type": "boolean"},
    {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "SHIPPED"]}},
    {"name": "lines", "type": {"type": "array", "items": {"type": "record", "name": "Line", "fields": [
      {"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}]}}},
    {"name": "tags", "type": {"type": "map", "values": "string"}},
    {"name": "placed_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
    {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 4}},
    {"name": "blob", "type": "bytes"},
    {"name": "amount", "type": ["null", "long", "string"]},
    {"name": "channel", "type": "string", "default": "web"},
    {"name": "big", "type": "long"}
  ]}`

const orderPayload = `{"id": 42, "customer": "ada", "note": "ring twice", "total": 19.5, "weight": 1.25,
  "paid": true, "status": "PAID", "lines": [{"sku": "A-1", "qty": 2}, {"sku": "B-2", "qty": 1}],
  "tags": {"gift": "yes", "rush": "no"}, "placed_at": "2026-12-04T10:00:00.123Z", "day": "2026-12-04",
  "price": "-1234.50", "digest": "3q2+7w==", "blob": "aGVsbG8=", "amount": "seven",
  "big": 9007199254740993}`

// TestAvroEncodesPayloadsAnIndependentDecoderReads encodes a payload using
// every type and reads it back with linkedin/goavro, a decoder that shares
// no code with the encoder, field by field.
func TestAvroEncodesPayloadsAnIndependentDecoderReads(t *testing.T) {
	c, err := newAvroCodec(orderSchema, &avro.SchemaCache{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.encode(nil, []byte(orderPayload), "")
	if err != nil {
		t.Fatal(err)
	}
	dec, err := goavro.NewCodec(orderSchema)
	if err != nil {
		t.Fatal(err)
	}
	native, rest, err := dec.NativeFromBinary(b)
	if err != nil {
		t.Fatalf("goavro cannot read the encoding: %v", err)
	}
	if len(rest) != 0 {
		t.Fatalf("%d bytes left over", len(rest))
	}
	got := native.(map[string]any)
	placed := time.Date(2026, 12, 4, 10, 0, 0, 123e6, time.UTC)
	check := func(field string, want any) {
		t.Helper()
		if g := got[field]; !equalNative(g, want) {
			t.Errorf("%s: got %#v, want %#v", field, g, want)
		}
	}
	check("id", int64(42))
	check("customer", "ada")
	check("note", map[string]any{"string": "ring twice"})
	check("total", 19.5)
	check("weight", float32(1.25))
	check("paid", true)
	check("status", "PAID")
	check("lines", []any{map[string]any{"sku": "A-1", "qty": int32(2)}, map[string]any{"sku": "B-2", "qty": int32(1)}})
	check("tags", map[string]any{"gift": "yes", "rush": "no"})
	check("placed_at", placed)
	check("day", time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC))
	check("price", big.NewRat(-123450, 100))
	check("digest", []byte{0xde, 0xad, 0xbe, 0xef})
	check("blob", []byte("hello"))
	check("amount", map[string]any{"string": "seven"})
	check("channel", "web")
	check("big", int64(9007199254740993))
}

func equalNative(a, b any) bool {
	switch x := b.(type) {
	case time.Time:
		y, ok := a.(time.Time)
		return ok && x.Equal(y)
	case *big.Rat:
		y, ok := a.(*big.Rat)
		return ok && x.Cmp(y) == 0
	case []byte:
		y, ok := a.([]byte)
		return ok && string(x) == string(y)
	case []any:
		y, ok := a.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equalNative(y[i], x[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := a.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k := range x {
			if !equalNative(y[k], x[k]) {
				return false
			}
		}
		return true
	}
	return a == b
}

// TestAvroFaultsNameTheField checks that a payload that does not fit is
// refused with the path of the field at fault, never written in part.
func TestAvroFaultsNameTheField(t *testing.T) {
	c, err := newAvroCodec(orderSchema, &avro.SchemaCache{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, from, to, want string
	}{
		{"type", `"total": 19.5`, `"total": "19.5"`, `field "total": want a number, got string "19.5"`},
		{"nested", `"qty": 1}`, `"qty": 1.5}`, `field "lines[1].qty": want an integer, got number 1.5`},
		{"int range", `"qty": 1}`, `"qty": 3000000000}`, `field "lines[1].qty": 3000000000 does not fit an Avro int`},
		{"enum", `"PAID"`, `"LOST"`, `field "status": "LOST" is not a symbol of enum shop.Status (NEW, PAID, SHIPPED)`},
		{"missing", `"customer": "ada", `, ``, `field "customer": missing, and record shop.OrderPlaced gives it no default`},
		{"unknown", `"paid": true,`, `"paid": true, "coupon": "X",`, `field "coupon": not a field of record shop.OrderPlaced`},
		{"optional", `"note": "ring twice"`, `"note": 7`, `field "note": want a string, got number 7`},
		{"union", `"amount": "seven"`, `"amount": true`, `field "amount": boolean true fits no branch of union [null, long, string]`},
		{"scale", `"-1234.50"`, `"-1234.505"`, `field "price": -1234.505 has more than 2 decimal places (the schema's scale)`},
		{"fixed", `"3q2+7w=="`, `"3q2+"`, `field "digest": 3 bytes, fixed shop.Digest holds 4`},
		{"not json", `{"id"`, `{"id`, `payload is not JSON`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			payload := strings.Replace(orderPayload, tc.from, tc.to, 1)
			if payload == orderPayload {
				t.Fatalf("%q is not in the payload", tc.from)
			}
			_, err := c.encode(nil, []byte(payload), "")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			var fe *fieldError
			if tc.name != "not json" && !errors.As(err, &fe) {
				t.Fatalf("%v is not a field error", err)
			}
		})
	}
}

// BenchmarkAvroEncode encodes the 17-field order payload: the relay's CPU
// per event for Avro, beside the JSON it starts from.
func BenchmarkAvroEncode(b *testing.B) {
	c, err := newAvroCodec(orderSchema, &avro.SchemaCache{})
	if err != nil {
		b.Fatal(err)
	}
	payload := []byte(orderPayload)
	buf := make([]byte, 0, 512)
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.encode(buf[:0], payload, ""); err != nil {
			b.Fatal(err)
		}
	}
}

// TestAvroKeepsValuesExact: what the breaker found changed silently is
// now either written exactly or refused: integers a float branch would
// round go to the long branch, text stays text, defaults of fixed and
// decimal fields are written, local timestamps keep their wall clock.
func TestAvroKeepsValuesExact(t *testing.T) {
	schema := `{"type": "record", "name": "E", "fields": [
	  {"name": "d", "type": ["null", "double", "long"]},
	  {"name": "f", "type": ["float", "long"]},
	  {"name": "s", "type": ["bytes", "string"]},
	  {"name": "lt", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
	  {"name": "lt2", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
	  {"name": "fx", "type": {"type": "fixed", "name": "Two", "size": 2}, "default": "\u0001\u0002"},
	  {"name": "amt", "type": {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 2}, "default": "\u00ff\u0085"},
	  {"name": "famt", "type": {"type": "fixed", "name": "Four", "size": 4, "logicalType": "decimal", "precision": 8, "scale": 2}, "default": "\u0000\u0000\u0004\u00d2"}
	]}`
	c, err := newAvroCodec(schema, &avro.SchemaCache{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.encode(nil, []byte(`{"d": 9007199254740993, "f": 16777217, "s": "abcd",
	  "lt": "2024-01-01T10:00:00+05:00", "lt2": "2024-01-01T10:00:00.5"}`), "")
	if err != nil {
		t.Fatal(err)
	}
	// goavro refuses a fixed decimal's default; defaults do not change
	// the binary form, so it decodes with the schema without it.
	dec, err := goavro.NewCodec(strings.Replace(schema, `, "default": "\u0000\u0000\u0004\u00d2"`, "", 1))
	if err != nil {
		t.Fatal(err)
	}
	native, _, err := dec.NativeFromBinary(b)
	if err != nil {
		t.Fatal(err)
	}
	got := native.(map[string]any)
	millis := func(v any) int64 {
		switch x := v.(type) {
		case time.Time:
			return x.UnixMilli()
		case int64:
			return x
		}
		t.Fatalf("a local timestamp decoded as %T", v)
		return 0
	}
	ten := time.Date(2024, 1, 1, 10, 0, 0, 0, time.UTC).UnixMilli()
	for _, c := range []struct {
		field string
		ok    bool
	}{
		{"d", equalNative(got["d"], map[string]any{"long": int64(9007199254740993)})},
		{"f", equalNative(got["f"], map[string]any{"long": int64(16777217)})},
		{"s", equalNative(got["s"], map[string]any{"string": "abcd"})},
		{"lt", millis(got["lt"]) == ten},
		{"lt2", millis(got["lt2"]) == ten+500},
		{"fx", equalNative(got["fx"], []byte{1, 2})},
		{"amt", equalNative(got["amt"], big.NewRat(-123, 100))},
		{"famt", equalNative(got["famt"], big.NewRat(1234, 100))},
	} {
		if !c.ok {
			t.Errorf("%s decoded as %#v", c.field, got[c.field])
		}
	}

	for _, tc := range []struct{ schema, payload, want string }{
		{`"float"`, `1e39`, `1e39 does not fit an Avro float`},
		{`"long"`, `9223372036854775808`, `9223372036854775808 does not fit an Avro long`},
		{`"double"`, `9007199254740993`, `9007199254740993 is an integer an Avro double cannot hold exactly`},
		{`{"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2}`, `"1/2"`, `want a decimal`},
		{`{"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2}`, `"0x1F"`, `want a decimal`},
		{`{"type": "long", "logicalType": "timestamp-micros"}`, `"2024-01-01T10:00:00.123456789Z"`, `more precise than the schema's microseconds`},
		{`{"type": "string", "logicalType": "uuid"}`, `"not-a-uuid"`, `want a UUID`},
	} {
		c, err := newAvroCodec(tc.schema, &avro.SchemaCache{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.encode(nil, []byte(tc.payload), ""); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s in %s: got %v, want %q", tc.payload, tc.schema, err, tc.want)
		}
	}
}
