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
