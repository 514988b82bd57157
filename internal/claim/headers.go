package claim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// decodeHeaderJSON decodes a row's headers column, the jsonb text
// PostgreSQL prints (jsonb_out), into Kafka headers. The outbox writer only
// writes an object of strings, and the table's row checks refuse anything
// else (outbox_headers_check, migrations 00007 and 00008;
// <table>_headers_check on a table prepared by sql.Adopt), but rows written
// before the checks were added, or with triggers off
// (session_replication_role = replica), can hold any JSON. Each member of the
// object becomes one header, with the name as it is (the relay itself
// drops the names it sets, event_id, event_type and aggregate_id), and a
// value by its JSON type:
//
//   - a string: its text, unescaped;
//   - a number: its JSON text exactly as stored, digit for digit (never
//     through float64, which would turn 9007199254740993 into
//     9007199254740992). jsonb stores numbers as numeric and prints them in
//     plain notation with their scale, so the text is PostgreSQL's: 100.10
//     stays "100.10", 1e3 is stored and sent as "1000";
//   - true or false: "true" or "false";
//   - null: no header at all, rather than an empty value that could not be
//     told apart from the empty string (a legal value);
//   - an object or array: its compact JSON text (no whitespace between
//     tokens; strings and numbers inside as stored).
//
// A document that is JSON null means no headers: it returns nil and no
// error. A document that is not an object (an array, a string, a number or
// a boolean), or not JSON at all, is an error saying which: the relay
// dead-letters the row with it as the reason. Duplicate names (impossible
// in jsonb, which keeps the last) keep the last value.
func decodeHeaderJSON(b []byte) (map[string]string, error) {
	doc := bytes.Trim(b, " \t\r\n") // JSON's whitespace (RFC 8259)
	if !json.Valid(doc) {
		return nil, errors.New("headers are not valid JSON")
	}
	switch doc[0] {
	case '{':
	case 'n':
		return nil, nil
	case '[':
		return nil, errors.New("headers are a JSON array, not an object")
	case '"':
		return nil, errors.New("headers are a JSON string, not an object")
	case 't', 'f':
		return nil, errors.New("headers are a JSON boolean, not an object")
	default:
		return nil, errors.New("headers are a JSON number, not an object")
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(doc, &raw); err != nil {
		return nil, fmt.Errorf("headers: %w", err)
	}
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		switch v[0] {
		case '"':
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return nil, fmt.Errorf("headers: %q: %w", k, err)
			}
			out[k] = s
		case 'n':
			// null: no header.
		case '{', '[':
			var c bytes.Buffer
			if err := json.Compact(&c, v); err != nil {
				return nil, fmt.Errorf("headers: %q: %w", k, err)
			}
			out[k] = c.String()
		default:
			// A number, true or false: the literal as stored.
			out[k] = string(v)
		}
	}
	return out, nil
}
