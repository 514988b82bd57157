package claim

import (
	"context"
	"maps"
	"strings"
	"testing"

	"github.com/pgoutbox/outbox/internal/testenv"
)

func TestDecodeHeaderJSON(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		in   string
		want map[string]string
		err  string // a substring of the error; "" for none
	}{
		{name: "strings", in: `{"a": "b", "tenant": "acme"}`, want: map[string]string{"a": "b", "tenant": "acme"}},
		{name: "escapes", in: `{"s": "caf\u00e9 \"q\" \\ \n", "é": "日本"}`, want: map[string]string{"s": "café \"q\" \\ \n", "é": "日本"}},
		{name: "empty object", in: `{}`, want: map[string]string{}},
		{name: "integer beyond float64", in: `{"n": 9007199254740993}`, want: map[string]string{"n": "9007199254740993"}},
		{name: "integer beyond int64", in: `{"n": 12345678901234567890}`, want: map[string]string{"n": "12345678901234567890"}},
		{name: "trailing zero", in: `{"n": 100.10}`, want: map[string]string{"n": "100.10"}},
		{name: "negative and exponent as written", in: `{"a": -0.5, "b": 1e3}`, want: map[string]string{"a": "-0.5", "b": "1e3"}},
		{name: "booleans", in: `{"t": true, "f": false}`, want: map[string]string{"t": "true", "f": "false"}},
		{name: "null value is no header", in: `{"a": null, "b": "x"}`, want: map[string]string{"b": "x"}},
		{name: "nested object", in: `{"o": {"x": [1, 2.50], "y": {"z": null}}}`, want: map[string]string{"o": `{"x":[1,2.50],"y":{"z":null}}`}},
		{name: "nested array", in: `{"a": [ "x" , true , "<&>" ]}`, want: map[string]string{"a": `["x",true,"<&>"]`}},
		{name: "empty and reserved names kept", in: `{"": "e", "event_id": "x"}`, want: map[string]string{"": "e", "event_id": "x"}},
		{name: "surrounding whitespace", in: " \n{\"a\":\"b\"}\t", want: map[string]string{"a": "b"}},
		{name: "json null document", in: `null`, want: nil},
		{name: "array document", in: `[1, "two"]`, err: "a JSON array, not an object"},
		{name: "empty array document", in: `[]`, err: "a JSON array, not an object"},
		{name: "string document", in: `"str"`, err: "a JSON string, not an object"},
		{name: "number document", in: `-1.5`, err: "a JSON number, not an object"},
		{name: "boolean document", in: `true`, err: "a JSON boolean, not an object"},
		{name: "empty", in: ``, err: "not valid JSON"},
		{name: "truncated", in: `{"a": "b"`, err: "not valid JSON"},
		{name: "trailing data", in: `{"a": "b"} {}`, err: "not valid JSON"},
	}
	for _, tc := range cases {
		got, err := decodeHeaderJSON([]byte(tc.in))
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %#q: err = %v, want one containing %q", tc.name, tc.in, err, tc.err)
			}
			if got != nil {
				t.Errorf("%s: %#q: headers %v with the error, want nil", tc.name, tc.in, got)
			}
		case err != nil:
			t.Errorf("%s: %#q: %v", tc.name, tc.in, err)
		case (got == nil) != (tc.want == nil) || !maps.Equal(got, tc.want):
			t.Errorf("%s: %#q: got %#v, want %#v", tc.name, tc.in, got, tc.want)
		}
	}
}

// The claim reads headers as the jsonb text PostgreSQL prints; this stores
// documents in a jsonb column and decodes what comes back, to pin down the
// exact texts a consumer sees for numbers (jsonb keeps numeric's digits and
// scale but not the notation) and nested values (jsonb adds ", " and ": ",
// which decodeHeaderJSON compacts away).
func TestDecodeHeaderJSONFromPostgresJSONB(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.DB(t)
	cases := []struct {
		stored  string // as inserted
		printed string // as PostgreSQL prints it back
		want    map[string]string
		err     string
	}{
		{`{"n":9007199254740993}`, `{"n": 9007199254740993}`, map[string]string{"n": "9007199254740993"}, ""},
		{`{"n":12345678901234567890}`, `{"n": 12345678901234567890}`, map[string]string{"n": "12345678901234567890"}, ""},
		{`{"n":100.10}`, `{"n": 100.10}`, map[string]string{"n": "100.10"}, ""},
		{`{"a":1e3,"b":1.0E-2,"c":-0,"d":1E+2,"e":-0.0}`, `{"a": 1000, "b": 0.010, "c": 0, "d": 100, "e": 0.0}`,
			map[string]string{"a": "1000", "b": "0.010", "c": "0", "d": "100", "e": "0.0"}, ""},
		{`{"t":true,"f":false,"z":null,"s":"caf\u00e9\n"}`, `{"f": false, "s": "café\n", "t": true, "z": null}`,
			map[string]string{"t": "true", "f": "false", "s": "café\n"}, ""},
		{`{"o":{"x":[1,2.50],"y":{"k":"v"}},"a":[]}`, `{"a": [], "o": {"x": [1, 2.50], "y": {"k": "v"}}}`,
			map[string]string{"o": `{"x":[1,2.50],"y":{"k":"v"}}`, "a": `[]`}, ""},
		{`{"a":"first","a":"last"}`, `{"a": "last"}`, map[string]string{"a": "last"}, ""},
		{`null`, `null`, nil, ""},
		{`[1,"two"]`, `[1, "two"]`, nil, "a JSON array, not an object"},
		{`"str"`, `"str"`, nil, "a JSON string, not an object"},
		{`42`, `42`, nil, "a JSON number, not an object"},
	}
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE h (n int PRIMARY KEY, headers jsonb)`); err != nil {
		t.Fatal(err)
	}
	for i, tc := range cases {
		if _, err := db.Pool.Exec(ctx, `INSERT INTO h VALUES ($1, $2::jsonb)`, i, tc.stored); err != nil {
			t.Fatal(err)
		}
	}
	for i, tc := range cases {
		// Scanned into []byte, as the claim scans o.headers.
		var b []byte
		if err := db.Pool.QueryRow(ctx, `SELECT headers FROM h WHERE n = $1`, i).Scan(&b); err != nil {
			t.Fatal(err)
		}
		if string(b) != tc.printed {
			t.Errorf("%#q: PostgreSQL printed %#q, want %#q", tc.stored, b, tc.printed)
		}
		got, err := decodeHeaderJSON(b)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%#q: err = %v, want one containing %q", tc.stored, err, tc.err)
			}
		case err != nil:
			t.Errorf("%#q: %v", tc.stored, err)
		case (got == nil) != (tc.want == nil) || !maps.Equal(got, tc.want):
			t.Errorf("%#q (printed %#q): got %#v, want %#v", tc.stored, b, got, tc.want)
		}
	}
}
