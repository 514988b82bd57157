package serde

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/hamba/avro/v2"
)

// avroCodec encodes an event's JSON payload in one Avro schema: it walks
// the schema and the decoded JSON together and writes Avro binary with
// hamba/avro's Writer. The payload is plain JSON, as writers produce it,
// not Avro's JSON encoding: a union takes the first branch the value fits
// (null for null), bytes and fixed are base64, a decimal is a JSON number
// or a string holding one, a timestamp or date a number in the schema's
// unit or an RFC 3339 string. A field the schema does not have is a fault,
// as is a missing field without a default: nothing of the event is
// dropped on the way to Kafka.
type avroCodec struct {
	schema avro.Schema
	// defaults caches each field's default as writeAvro takes it
	// (*avro.Field to any; defaultJSON).
	defaults sync.Map
}

// newAvroCodec parses text, with the named types of its references in
// cache.
func newAvroCodec(text string, cache *avro.SchemaCache) (*avroCodec, error) {
	s, err := avro.ParseWithCache(text, "", cache)
	if err != nil {
		return nil, err
	}
	return &avroCodec{schema: s}, nil
}

func (c *avroCodec) encode(dst, payload []byte, _ string) ([]byte, error) {
	v, err := decodeJSON(payload)
	if err != nil {
		return nil, err
	}
	w := avro.NewWriter(nil, 256)
	if err := c.writeAvro(w, c.schema, v, ""); err != nil {
		return nil, err
	}
	if w.Error != nil {
		return nil, w.Error
	}
	return append(dst, w.Buffer()...), nil
}

// decodeJSON decodes one JSON value, numbers kept as json.Number so that a
// long keeps all of its digits.
func decodeJSON(payload []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(payload))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("payload is not JSON: %w", err)
	}
	if d.More() {
		return nil, fmt.Errorf("payload is not one JSON value")
	}
	return v, nil
}

// fieldError is a payload that does not fit its schema at path.
type fieldError struct {
	path string
	msg  string
}

func (e *fieldError) Error() string {
	if e.path == "" {
		return "payload: " + e.msg
	}
	return fmt.Sprintf("field %q: %s", e.path, e.msg)
}

func mismatch(path, want string, v any) error {
	return &fieldError{path: path, msg: fmt.Sprintf("want %s, got %s", want, describe(v))}
}

// describe names a JSON value for an error: its kind and a short excerpt.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean " + strconv.FormatBool(x)
	case json.Number:
		return "number " + x.String()
	case string:
		if len(x) > 32 {
			x = x[:32] + "..."
		}
		return "string " + strconv.Quote(x)
	case []any:
		return fmt.Sprintf("array of %d", len(x))
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// writeAvro writes v in schema s to w; path names v in errors.
func (c *avroCodec) writeAvro(w *avro.Writer, s avro.Schema, v any, path string) error {
	switch s := s.(type) {
	case *avro.RefSchema:
		return c.writeAvro(w, s.Schema(), v, path)
	case *avro.PrimitiveSchema:
		return writePrimitive(w, s, v, path)
	case *avro.RecordSchema:
		return c.writeRecord(w, s, v, path)
	case *avro.EnumSchema:
		str, ok := v.(string)
		if !ok {
			return mismatch(path, "a symbol of enum "+s.FullName(), v)
		}
		for i, sym := range s.Symbols() {
			if sym == str {
				w.WriteInt(int32(i))
				return nil
			}
		}
		return &fieldError{path: path, msg: fmt.Sprintf("%q is not a symbol of enum %s (%s)", str, s.FullName(), strings.Join(s.Symbols(), ", "))}
	case *avro.ArraySchema:
		items, ok := v.([]any)
		if !ok {
			return mismatch(path, "an array", v)
		}
		if len(items) > 0 {
			w.WriteLong(int64(len(items)))
			for i, it := range items {
				if err := c.writeAvro(w, s.Items(), it, fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
		}
		w.WriteLong(0)
		return nil
	case *avro.MapSchema:
		m, ok := v.(map[string]any)
		if !ok {
			return mismatch(path, "an object (an Avro map)", v)
		}
		if len(m) > 0 {
			w.WriteLong(int64(len(m)))
			for _, k := range sortedKeys(m) {
				w.WriteString(k)
				if err := c.writeAvro(w, s.Values(), m[k], join(path, k)); err != nil {
					return err
				}
			}
		}
		w.WriteLong(0)
		return nil
	case *avro.UnionSchema:
		return c.writeUnion(w, s, v, path)
	case *avro.FixedSchema:
		return writeFixed(w, s, v, path)
	}
	return &fieldError{path: path, msg: fmt.Sprintf("schema type %s is not supported", s.Type())}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// writeRecord writes the record's fields in the schema's order: a missing
// field takes its default, a field the schema lacks is a fault.
func (c *avroCodec) writeRecord(w *avro.Writer, s *avro.RecordSchema, v any, path string) error {
	m, ok := v.(map[string]any)
	if !ok {
		return mismatch(path, "an object (record "+s.FullName()+")", v)
	}
	known := 0
	for _, f := range s.Fields() {
		fv, present := m[f.Name()]
		if present {
			known++
		} else {
			if !f.HasDefault() {
				return &fieldError{path: join(path, f.Name()), msg: "missing, and record " + s.FullName() + " gives it no default"}
			}
			fv = c.defaultOf(f)
		}
		if err := c.writeAvro(w, f.Type(), fv, join(path, f.Name())); err != nil {
			return err
		}
	}
	if known < len(m) {
		for _, k := range sortedKeys(m) {
			if !hasField(s, k) {
				return &fieldError{path: join(path, k), msg: "not a field of record " + s.FullName()}
			}
		}
	}
	return nil
}

func hasField(s *avro.RecordSchema, name string) bool {
	for _, f := range s.Fields() {
		if f.Name() == name {
			return true
		}
	}
	return false
}

// defaultOf returns defaultJSON(f), computed once per field.
func (c *avroCodec) defaultOf(f *avro.Field) any {
	if v, ok := c.defaults.Load(f); ok {
		return v
	}
	v := defaultJSON(f)
	c.defaults.Store(f, v)
	return v
}

// defaultJSON returns a field's default as writeAvro takes it: decoded
// JSON, bytes and fixed (Avro writes their defaults as strings of code
// points 0-255) as base64. A union's default is of its first branch.
func defaultJSON(f *avro.Field) any {
	d := f.Default()
	t := f.Type()
	if u, ok := t.(*avro.UnionSchema); ok {
		t = u.Types()[0]
	}
	if r, ok := t.(*avro.RefSchema); ok {
		t = r.Schema()
	}
	if t.Type() == avro.Bytes || t.Type() == avro.Fixed {
		if raw, ok := rawBytes(d); ok {
			if dec, ok := logicalOf(t).(*avro.DecimalLogicalSchema); ok {
				return fromTwosComplement(raw, dec.Scale())
			}
			return base64.StdEncoding.EncodeToString(raw)
		}
	}
	b, err := json.Marshal(d)
	if err != nil {
		return d
	}
	v, err := decodeJSON(b)
	if err != nil {
		return d
	}
	return v
}

// unionOrder is the order writeUnion tries s's branches for v: the
// schema's, except that a string tries bytes and fixed (base64) after the
// others, so that text stays text even when it happens to be base64.
func unionOrder(s *avro.UnionSchema, v any) []int {
	types := s.Types()
	order := make([]int, 0, len(types))
	_, str := v.(string)
	for pass := 0; pass < 2; pass++ {
		for i, t := range types {
			if r, ok := t.(*avro.RefSchema); ok {
				t = r.Schema()
			}
			binary := str && (t.Type() == avro.Bytes || t.Type() == avro.Fixed)
			if binary == (pass == 1) {
				order = append(order, i)
			}
		}
	}
	return order
}

// rawBytes returns a bytes or fixed default as hamba/avro parsed it: a
// string of code points 0-255, a []byte, or a [N]byte.
func rawBytes(d any) ([]byte, bool) {
	switch x := d.(type) {
	case string:
		raw := make([]byte, 0, len(x))
		for _, r := range x {
			raw = append(raw, byte(r))
		}
		return raw, true
	case []byte:
		return x, true
	}
	if rv := reflect.ValueOf(d); rv.Kind() == reflect.Array && rv.Type().Elem().Kind() == reflect.Uint8 {
		raw := make([]byte, rv.Len())
		reflect.Copy(reflect.ValueOf(raw), rv)
		return raw, true
	}
	return nil, false
}

func logicalOf(s avro.Schema) avro.LogicalSchema {
	if l, ok := s.(avro.LogicalTypeSchema); ok {
		return l.Logical()
	}
	return nil
}

// fromTwosComplement returns the decimal whose unscaled value is b
// (big-endian two's complement), as the JSON number writeAvro takes.
func fromTwosComplement(b []byte, scale int) json.Number {
	n := new(big.Int).SetBytes(b)
	if len(b) > 0 && b[0]&0x80 != 0 {
		n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	r := new(big.Rat).SetFrac(n, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale)), nil))
	return json.Number(r.FloatString(scale))
}

// writeUnion writes the first branch v fits: null for null, else the
// first non-null branch that encodes it.
func (c *avroCodec) writeUnion(w *avro.Writer, s *avro.UnionSchema, v any, path string) error {
	var firstErr error
	for _, i := range unionOrder(s, v) {
		branch := s.Types()[i]
		if branch.Type() == avro.Null {
			if v == nil {
				w.WriteInt(int32(i))
				return nil
			}
			continue
		}
		if v == nil {
			continue
		}
		bw := avro.NewWriter(nil, 64)
		if err := c.writeAvro(bw, branch, v, path); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		w.WriteInt(int32(i))
		_, _ = w.Write(bw.Buffer())
		return nil
	}
	names := make([]string, len(s.Types()))
	for i, t := range s.Types() {
		names[i] = typeName(t)
	}
	msg := fmt.Sprintf("%s fits no branch of union [%s]", describe(v), strings.Join(names, ", "))
	var fe *fieldError
	if len(s.Types()) == 2 && s.Nullable() && asFieldError(firstErr, &fe) {
		// An optional field: the one branch's error says more.
		return firstErr
	}
	return &fieldError{path: path, msg: msg}
}

func asFieldError(err error, fe **fieldError) bool {
	e, ok := err.(*fieldError)
	if ok {
		*fe = e
	}
	return ok
}

func typeName(s avro.Schema) string {
	if n, ok := s.(avro.NamedSchema); ok {
		return n.FullName()
	}
	return string(s.Type())
}

func writePrimitive(w *avro.Writer, s *avro.PrimitiveSchema, v any, path string) error {
	var logical avro.LogicalType
	if l := s.Logical(); l != nil {
		logical = l.Type()
	}
	switch s.Type() {
	case avro.Null:
		if v != nil {
			return mismatch(path, "null", v)
		}
	case avro.Boolean:
		b, ok := v.(bool)
		if !ok {
			return mismatch(path, "a boolean", v)
		}
		w.WriteBool(b)
	case avro.Int:
		n, err := intValue(v, logical, path)
		if err != nil {
			return err
		}
		if n < math.MinInt32 || n > math.MaxInt32 {
			return &fieldError{path: path, msg: fmt.Sprintf("%d does not fit an Avro int", n)}
		}
		w.WriteInt(int32(n))
	case avro.Long:
		n, err := intValue(v, logical, path)
		if err != nil {
			return err
		}
		w.WriteLong(n)
	case avro.Float, avro.Double:
		f, err := floatValue(v, s.Type() == avro.Float, path)
		if err != nil {
			return err
		}
		if s.Type() == avro.Float {
			w.WriteFloat(float32(f))
		} else {
			w.WriteDouble(f)
		}
	case avro.Bytes:
		b, err := bytesValue(v, s.Logical(), 0, path)
		if err != nil {
			return err
		}
		w.WriteBytes(b)
	case avro.String:
		str, ok := v.(string)
		if !ok {
			return mismatch(path, "a string", v)
		}
		if logical == avro.UUID {
			if _, err := uuid.Parse(str); err != nil {
				return mismatch(path, "a UUID", v)
			}
		}
		w.WriteString(str)
	default:
		return &fieldError{path: path, msg: fmt.Sprintf("schema type %s is not supported", s.Type())}
	}
	return nil
}

// floatValue reads a float (single) or a double: a JSON number in range,
// and an integer only if it is held exactly (at most 2^24 or 2^53), so that
// a union takes its long branch for a long a double would round.
func floatValue(v any, single bool, path string) (float64, error) {
	num, ok := v.(json.Number)
	if !ok {
		return 0, mismatch(path, "a number", v)
	}
	kind, exact := "double", int64(1)<<53
	if single {
		kind, exact = "float", 1<<24
	}
	f, err := num.Float64()
	if err != nil || (single && math.IsInf(float64(float32(f)), 0)) {
		return 0, &fieldError{path: path, msg: fmt.Sprintf("%s does not fit an Avro %s", num, kind)}
	}
	if integerText(num.String()) {
		if n, ok := new(big.Int).SetString(num.String(), 10); ok && n.CmpAbs(big.NewInt(exact)) > 0 {
			return 0, &fieldError{path: path, msg: fmt.Sprintf("%s is an integer an Avro %s cannot hold exactly", num, kind)}
		}
	}
	return f, nil
}

// integerText reports whether a JSON number is written as an integer.
func integerText(s string) bool { return !strings.ContainsAny(s, ".eE") }

// intValue reads an int or long: a JSON integer, or for a date or a
// timestamp a string converted to the logical type's unit (an RFC 3339
// time; a local timestamp keeps its wall clock, with or without an
// offset; a time more precise than the unit is a fault, not rounded).
func intValue(v any, logical avro.LogicalType, path string) (int64, error) {
	switch x := v.(type) {
	case json.Number:
		n, err := x.Int64()
		if err != nil {
			if integerText(x.String()) {
				return 0, &fieldError{path: path, msg: fmt.Sprintf("%s does not fit an Avro long", x)}
			}
			return 0, mismatch(path, "an integer", v)
		}
		return n, nil
	case string:
		switch logical {
		case avro.Date:
			t, err := time.Parse(time.DateOnly, x)
			if err != nil {
				return 0, mismatch(path, "a date (days since 1970-01-01, or YYYY-MM-DD)", v)
			}
			return t.Unix() / 86400, nil
		case avro.TimestampMillis, avro.TimestampMicros, avro.LocalTimestampMillis, avro.LocalTimestampMicros:
			return timestampValue(x, logical, path)
		}
	}
	return 0, mismatch(path, "an integer", v)
}

func timestampValue(x string, logical avro.LogicalType, path string) (int64, error) {
	local := logical == avro.LocalTimestampMillis || logical == avro.LocalTimestampMicros
	t, err := time.Parse(time.RFC3339Nano, x)
	if err != nil && local {
		t, err = time.Parse("2006-01-02T15:04:05.999999999", x)
	}
	if err != nil {
		return 0, mismatch(path, "a timestamp (a number, or RFC 3339)", x)
	}
	if local {
		// The wall clock as written, whatever the offset.
		t = time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
	}
	unit, name := time.Microsecond, "microseconds"
	if logical == avro.TimestampMillis || logical == avro.LocalTimestampMillis {
		unit, name = time.Millisecond, "milliseconds"
	}
	if t.Nanosecond()%int(unit) != 0 {
		return 0, &fieldError{path: path, msg: fmt.Sprintf("%s is more precise than the schema's %s", x, name)}
	}
	if unit == time.Millisecond {
		return t.UnixMilli(), nil
	}
	return t.UnixMicro(), nil
}

// bytesValue reads bytes (base64) or a decimal (a number, or a string
// holding one) as its two's-complement unscaled value; size > 0 pads a
// fixed decimal to its size.
func bytesValue(v any, l avro.LogicalSchema, size int, path string) ([]byte, error) {
	if d, ok := l.(*avro.DecimalLogicalSchema); ok {
		return decimalBytes(v, d, size, path)
	}
	str, ok := v.(string)
	if !ok {
		return nil, mismatch(path, "a base64 string", v)
	}
	b, err := base64.StdEncoding.DecodeString(str)
	if err != nil {
		return nil, mismatch(path, "a base64 string", v)
	}
	return b, nil
}

// decimalRE is a decimal number as JSON writes one (big.Rat would also
// take "1/2" and "0x1F").
var decimalRE = regexp.MustCompile(`^-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)

func decimalBytes(v any, d *avro.DecimalLogicalSchema, size int, path string) ([]byte, error) {
	var text string
	switch x := v.(type) {
	case json.Number:
		text = x.String()
	case string:
		text = x
	default:
		return nil, mismatch(path, "a decimal (a number or a string)", v)
	}
	var r *big.Rat
	ok := decimalRE.MatchString(text)
	if ok {
		r, ok = new(big.Rat).SetString(text)
	}
	if !ok {
		return nil, mismatch(path, "a decimal (a number or a string holding one)", v)
	}
	scaled := new(big.Rat).Mul(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(d.Scale())), nil)))
	if !scaled.IsInt() {
		return nil, &fieldError{path: path, msg: fmt.Sprintf("%s has more than %d decimal places (the schema's scale)", text, d.Scale())}
	}
	unscaled := scaled.Num()
	limit := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(d.Precision())), nil)
	if new(big.Int).Abs(unscaled).Cmp(limit) >= 0 {
		return nil, &fieldError{path: path, msg: fmt.Sprintf("%s has more than %d digits (the schema's precision)", text, d.Precision())}
	}
	b := twosComplement(unscaled)
	if size > 0 {
		if len(b) > size {
			return nil, &fieldError{path: path, msg: fmt.Sprintf("%s does not fit in %d bytes", text, size)}
		}
		pad := byte(0)
		if unscaled.Sign() < 0 {
			pad = 0xff
		}
		for len(b) < size {
			b = append([]byte{pad}, b...)
		}
	}
	return b, nil
}

// twosComplement returns n as big-endian two's complement in the fewest
// bytes.
func twosComplement(n *big.Int) []byte {
	if n.Sign() >= 0 {
		b := n.Bytes()
		if len(b) == 0 || b[0]&0x80 != 0 {
			b = append([]byte{0}, b...)
		}
		return b
	}
	// -n - 1, inverted, is n's two's complement.
	m := new(big.Int).Sub(new(big.Int).Neg(n), big.NewInt(1))
	b := m.Bytes()
	if len(b) == 0 || b[0]&0x80 != 0 {
		b = append([]byte{0}, b...)
	}
	for i := range b {
		b[i] = ^b[i]
	}
	return b
}

func writeFixed(w *avro.Writer, s *avro.FixedSchema, v any, path string) error {
	b, err := bytesValue(v, s.Logical(), s.Size(), path)
	if err != nil {
		return err
	}
	if len(b) != s.Size() {
		return &fieldError{path: path, msg: fmt.Sprintf("%d bytes, fixed %s holds %d", len(b), s.FullName(), s.Size())}
	}
	_, _ = w.Write(b)
	return nil
}
