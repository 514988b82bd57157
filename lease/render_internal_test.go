package lease

import (
	"reflect"
	"strings"
	"testing"
)

// A slot without a value, an argument without a field and a field the
// statement does not use are errors.
func TestRenderErrors(t *testing.T) {
	t.Parallel()
	type ab struct {
		A int `arg:"a"`
		B int `arg:"b"`
	}
	type untagged struct{ A int }
	for _, tc := range []struct {
		sql  string
		args reflect.Type
		want string
	}{
		{"SELECT @a, @b, @a", reflect.TypeOf(ab{}), ""},
		{"SELECT @a, '@c', \"@d\"", reflect.TypeOf(ab{}), "does not use"},
		{"SELECT @a, @b, @c", reflect.TypeOf(ab{}), "@c is no field"},
		{"SELECT @a", reflect.TypeOf(untagged{}), "no arg tag"},
	} {
		got, err := bindArgs(tc.sql, tc.args)
		switch {
		case tc.want == "" && (err != nil || got != "SELECT $1, $2, $1"):
			t.Errorf("%q: %q, %v", tc.sql, got, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: %v, want an error with %q", tc.sql, err, tc.want)
		}
	}
	if _, err := fillSlots("SELECT /* TEMPLATE: nope */", map[string]string{}); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("missing slot: %v", err)
	}
	got, err := fillSlots("-- a comment\nSELECT /* TEMPLATE: x */ -- why\n  FROM t /* note */ WHERE s = '--' -- more\n", map[string]string{"x": "1"})
	if want := "SELECT 1\n  FROM t  WHERE s = '--'"; err != nil || got != want {
		t.Errorf("fillSlots: %q, %v; want %q", got, err, want)
	}
	a := stmt[ab]{sql: "SELECT $1, $2"}.args(ab{A: 1, B: 2})
	if !reflect.DeepEqual(a, []any{1, 2}) {
		t.Errorf("args: %v", a)
	}
}
