package sqlfile

import (
	"reflect"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5/pgconn"
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

// Render finds a named query of its Set, fills its slots and binds its
// arguments; a Renderer keeps the first error and renders nothing after
// it.
func TestRenderFromFiles(t *testing.T) {
	t.Parallel()
	type args struct {
		ID int `arg:"id"`
	}
	set, err := Load(fstest.MapFS{
		"q/get.sql":   {Data: []byte("-- Reads rows.\n\n-- name: Get :one\n-- Gets one row.\nSELECT * FROM /* TEMPLATE: table */ WHERE id = @id\n")},
		"q/bad.sql":   {Data: []byte("-- name: Bad :exec\nSELECT /* TEMPLATE: missing */\n\n-- name: Frag :fragment\nid = @id\n")},
		"q/notes.txt": {Data: []byte("-- name: Get :one\nnot SQL\n")},
	}, "q")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Render[args](set, "Get", map[string]string{"table": `"outbox"`})
	if want := `SELECT * FROM "outbox" WHERE id = $1`; err != nil || s.SQL != want {
		t.Fatalf("Render: %q, %v; want %q", s.SQL, err, want)
	}
	r := Renderer{Set: set, Slots: map[string]string{"table": "t"}}
	var bad, good Stmt[args]
	Into(&r, &bad, "Bad")
	Into(&r, &good, "Get")
	if r.Err == nil || !strings.Contains(r.Err.Error(), "q/bad.sql:1: query Bad") || good.SQL != "" {
		t.Fatalf("Renderer after a bad query: err %v, next statement %q; want the query named and nothing rendered after", r.Err, good.SQL)
	}
	if _, err := Render[args](set, "None", nil); err == nil || !strings.Contains(err.Error(), "no query named None") {
		t.Fatalf("Render of a missing query: %v", err)
	}
	if _, err := Render[args](set, "Frag", nil); err == nil || !strings.Contains(err.Error(), "is a fragment") {
		t.Fatalf("Render of a fragment: %v", err)
	}
	if f, err := set.Fill("Frag", nil); err != nil || f != "id = @id" {
		t.Fatalf("Fill of a fragment: %q, %v", f, err)
	}
	var names []string
	for _, q := range set.Queries() {
		names = append(names, q.Name+" "+string(q.Kind))
	}
	if want := []string{"Bad :exec", "Frag :fragment", "Get :one"}; !reflect.DeepEqual(names, want) {
		t.Errorf("Queries: %v, want %v", names, want)
	}
}

// Parse splits a file at its name lines; a malformed name line, an unknown
// kind, SQL before the first name line and a block without SQL are
// errors, and so is a name given twice in a directory.
func TestParse(t *testing.T) {
	t.Parallel()
	qs, err := Parse("f.sql", `-- The file's own comment.

-- name: One :one
-- Explains One.
SELECT 1

-- name: Many :many
SELECT generate_series(1, 2)
-- name: Exec :exec
/* a note */ SET LOCAL lock_timeout = 1;
-- name: ExecRows :execrows
DELETE FROM t
-- name: Frag :fragment
/* TEMPLATE: x */
`)
	if err != nil {
		t.Fatal(err)
	}
	want := []Query{
		{Name: "One", Kind: One, File: "f.sql", Line: 3, Text: "-- Explains One.\nSELECT 1\n"},
		{Name: "Many", Kind: Many, File: "f.sql", Line: 7, Text: "SELECT generate_series(1, 2)\n"},
		{Name: "Exec", Kind: Exec, File: "f.sql", Line: 9, Text: "/* a note */ SET LOCAL lock_timeout = 1;\n"},
		{Name: "ExecRows", Kind: ExecRows, File: "f.sql", Line: 11, Text: "DELETE FROM t\n"},
		{Name: "Frag", Kind: Fragment, File: "f.sql", Line: 13, Text: "/* TEMPLATE: x */\n"},
	}
	if !reflect.DeepEqual(qs, want) {
		t.Errorf("Parse:\n%+v\nwant\n%+v", qs, want)
	}
	for text, msg := range map[string]string{
		"SELECT 1\n-- name: A :one\nSELECT 1":                  "f.sql:1: SQL before the first",
		"-- name: A\nSELECT 1":                                 "f.sql:1:",
		"-- name: :one\nSELECT 1":                              "f.sql:1:",
		"-- name: A :one extra\nSELECT 1":                      "f.sql:1:",
		"-- name: A-b :one\nSELECT 1":                          "f.sql:1:",
		"-- name: A :batchone\nSELECT 1":                       `unknown kind ":batchone"`,
		"-- name: A :one\nSELECT 1\n-- name: B :exec\n":        "f.sql:3: query B has no SQL",
		"-- name: A :one\n-- only a comment\n/* and this */\n": "f.sql:1: query A has no SQL",
		"-- name: A :one\nSELECT '":                            "unterminated",
	} {
		if _, err := Parse("f.sql", text); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("Parse(%q): %v, want an error with %q", text, err, msg)
		}
	}
	for name, fsys := range map[string]fstest.MapFS{
		"in one file": {"d/a.sql": {Data: []byte("-- name: A :one\nSELECT 1\n-- name: A :one\nSELECT 2\n")}},
		"in two files": {
			"d/a.sql": {Data: []byte("-- name: A :one\nSELECT 1\n")},
			"d/b.sql": {Data: []byte("-- name: A :exec\nSELECT 2\n")},
		},
	} {
		if _, err := Load(fsys, "d"); err == nil || !strings.Contains(err.Error(), "query A is named at d/a.sql:1 already") {
			t.Errorf("a name given twice %s: %v", name, err)
		}
	}
	if _, err := Load(fstest.MapFS{"d/a.txt": {}}, "d"); err == nil {
		t.Error("Load of a directory without .sql files: no error")
	}
	if _, err := Load(fstest.MapFS{"d/a.sql": {Data: []byte("-- name: A :nope\nSELECT 1\n")}}, "d"); err == nil || !strings.Contains(err.Error(), "d/a.sql:1:") {
		t.Errorf("Load of a bad file: %v, want the file and line named", err)
	}
}

// With copies the slots and sets the pairs over them, leaving the
// original as it was.
func TestWith(t *testing.T) {
	t.Parallel()
	base := map[string]string{"a": "1", "b": "2"}
	got := With(base, "b", "3", "c", "4")
	if want := map[string]string{"a": "1", "b": "3", "c": "4"}; !reflect.DeepEqual(got, want) || base["b"] != "2" {
		t.Errorf("With: %v (base %v), want %v", got, base, want)
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

// Columns maps the columns of a result to the tagged fields of a struct,
// whatever their order, and names a column or a field left over.
func TestColumns(t *testing.T) {
	t.Parallel()
	type row struct {
		A     int    `db:"a"`
		B     string `db:"b"`
		Extra bool   `db:"-"`
		Plain int
	}
	fields := func(names ...string) []pgconn.FieldDescription {
		var out []pgconn.FieldDescription
		for _, n := range names {
			out = append(out, pgconn.FieldDescription{Name: n})
		}
		return out
	}
	var r row
	dest, err := Columns(fields("b", "a"), &r)
	if err != nil || len(dest) != 2 || dest[0] != any(&r.B) || dest[1] != any(&r.A) {
		t.Fatalf("Columns: %v, %v; want &r.B, &r.A", dest, err)
	}
	for _, tc := range []struct {
		cols []string
		want string
	}{
		{[]string{"a", "b", "c"}, `column "c" has no field`},
		{[]string{"a"}, `field for column "b"`},
		{[]string{"a", "b", "a"}, `column "a" has no field`},
	} {
		if _, err := Columns(fields(tc.cols...), &r); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Columns(%v): %v, want an error with %q", tc.cols, err, tc.want)
		}
	}
	if _, err := Columns(fields("a"), r); err == nil {
		t.Error("Columns of a struct, not a pointer: no error")
	}
}
