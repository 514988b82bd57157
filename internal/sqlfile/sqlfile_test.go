package sqlfile

import (
	"reflect"
	"strings"
	"testing"
	"testing/fstest"
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
		got, err := BindArgs(tc.sql, tc.args)
		switch {
		case tc.want == "" && (err != nil || got != "SELECT $1, $2, $1"):
			t.Errorf("%q: %q, %v", tc.sql, got, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: %v, want an error with %q", tc.sql, err, tc.want)
		}
	}
	if _, err := FillSlots("SELECT /* TEMPLATE: nope */", map[string]string{}); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("missing slot: %v", err)
	}
	got, err := FillSlots("-- a comment\nSELECT /* TEMPLATE: x */ -- why\n  FROM t /* note */ WHERE s = '--' -- more\n", map[string]string{"x": "1"})
	if want := "SELECT 1\n  FROM t  WHERE s = '--'"; err != nil || got != want {
		t.Errorf("FillSlots: %q, %v; want %q", got, err, want)
	}
	a := Stmt[ab]{SQL: "SELECT $1, $2"}.Args(ab{A: 1, B: 2})
	if !reflect.DeepEqual(a, []any{1, 2}) {
		t.Errorf("args: %v", a)
	}
	if a := (Stmt[NoArgs]{SQL: "SELECT 1"}).Args(NoArgs{}); a != nil {
		t.Errorf("args of a statement without arguments: %v, want nil", a)
	}
}

// Render reads <dir>/<name>.sql of its Files, fills its slots and binds
// its arguments; a Renderer keeps the first error and renders nothing
// after it.
func TestRenderFromFiles(t *testing.T) {
	t.Parallel()
	type args struct {
		ID int `arg:"id"`
	}
	files := NewFiles(fstest.MapFS{
		"q/get.sql": {Data: []byte("-- Gets one row.\nSELECT * FROM /* TEMPLATE: table */ WHERE id = @id\n")},
		"q/bad.sql": {Data: []byte("SELECT /* TEMPLATE: missing */")},
	}, "q")
	s, err := Render[args](files, "get", map[string]string{"table": `"outbox"`})
	if want := `SELECT * FROM "outbox" WHERE id = $1`; err != nil || s.SQL != want {
		t.Fatalf("Render: %q, %v; want %q", s.SQL, err, want)
	}
	r := Renderer{Files: files, Slots: map[string]string{"table": "t"}}
	var bad, good Stmt[args]
	Into(&r, &bad, "bad")
	Into(&r, &good, "get")
	if r.Err == nil || !strings.Contains(r.Err.Error(), "q/bad.sql") || good.SQL != "" {
		t.Fatalf("Renderer after a bad file: err %v, next statement %q; want the file named and nothing rendered after", r.Err, good.SQL)
	}
	if _, err := Render[args](files, "none", nil); err == nil {
		t.Fatal("Render of a missing file: no error")
	}
}

func TestLeftover(t *testing.T) {
	t.Parallel()
	for sql, want := range map[string]bool{
		`SELECT 1 FROM "app"."Out""box" WHERE x = $1`:           false,
		`SELECT '-- not a comment', "/* a name */" FROM t`:      false,
		`SELECT 1 FROM /* TEMPLATE: table */`:                   true,
		`SELECT 1 FROM t WHERE id = @id`:                        true,
		"SELECT 1 -- a comment\nFROM t":                         true,
		`SELECT 'user@example.org', "@name" FROM t WHERE a = 1`: false,
	} {
		if got := Leftover(sql); got != want {
			t.Errorf("Leftover(%q) = %v, want %v", sql, got, want)
		}
	}
}
