// Package sqlfile renders the project's SQL. Each package keeps its
// statements in a few .sql files of named queries next to it, a file per
// concern (e.g. internal/claim/sql/claim.sql, internal/claim/sql/membership.sql), embeds
// them and loads them once:
//
//	//go:embed sql/*.sql
//	var sqlFS embed.FS
//
//	var queries = sqlfile.MustLoad(sqlFS, "sql")
//
// A file is a sequence of blocks in sqlc's convention: each starts with a
// line "-- name: <Name> <kind>", <kind> one of :one, :many, :exec and
// :execrows (what the statement returns, as sqlc spells it) or :fragment
// (this package's own: a piece of SQL that other statements take as a
// slot value, not a statement), followed by the SQL comments that explain
// it and its text, up to the next name line. Comments before the first
// name line describe the file. Names are unique across a package's files.
//
// Two kinds of markers stand for what differs between uses:
//
//   - /* TEMPLATE: name */ is a slot: the table, the tables beside it, the
//     configured columns, a few SQL fragments, all quoted with
//     internal/sqlname by the caller.
//   - @name is a named argument. A statement's arguments are the fields
//     of one Go struct, tagged `arg:"name"`: a field's position is its
//     argument's $n, so callers fill in fields by name and Stmt.Args
//     builds the positional list.
//
// Render substitutes both once (callers render when they are built, never
// per call) and drops the comments, so the statement sent to the server
// is the bare SQL. An unknown name, a name given twice, a malformed name
// line, a block without SQL, a slot without a value, an argument without a
// field and a field the statement does not use are errors. To run a
// statement in psql, replace each slot by the name it stands for and each
// @name by a value.
//
// Rows are read by column name into structs whose fields are tagged
// `db:"column"`: with pgx.RowToStructByName, or, on a hot path, with
// Columns, which looks the names up once per result instead of per row.
package sqlfile

import (
	"fmt"
	"io/fs"
	"path"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// NoArgs is the argument struct of a statement without arguments.
type NoArgs struct{}

// Stmt is one rendered statement whose $1, $2, ... are the fields of A,
// in order.
type Stmt[A any] struct {
	// SQL is the statement as sent to the server.
	SQL string
}

// Args returns a's fields, in order: the statement's positional
// arguments (nil for a struct without fields).
func (s Stmt[A]) Args(a A) []any {
	v := reflect.ValueOf(a)
	if v.NumField() == 0 {
		return nil
	}
	out := make([]any, v.NumField())
	for i := range out {
		out[i] = v.Field(i).Interface()
	}
	return out
}

// Kind is what a named query is, from its name line: ":one", ":many",
// ":exec", ":execrows" (sqlc's spelling) or ":fragment".
type Kind string

// The kinds of named queries.
const (
	One      Kind = ":one"
	Many     Kind = ":many"
	Exec     Kind = ":exec"
	ExecRows Kind = ":execrows"
	Fragment Kind = ":fragment"
)

// Query is one named block of a .sql file.
type Query struct {
	Name string
	Kind Kind
	// File and Line are where its name line is.
	File string
	Line int
	// Text is the block after its name line: its comments and its SQL.
	Text string
}

// nameRE matches a name line; what follows "-- name:" is checked apart.
var nameRE = regexp.MustCompile(`^--\s*name:`)

// Parse splits the text of the .sql file file into its named queries, in
// order.
func Parse(file, text string) ([]Query, error) {
	var out []Query
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if !nameRE.MatchString(l) {
			if len(out) > 0 {
				q := &out[len(out)-1]
				q.Text += l + "\n"
			} else if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "--") {
				return nil, fmt.Errorf("%s:%d: SQL before the first -- name: line", file, i+1)
			}
			continue
		}
		f := strings.Fields(nameRE.ReplaceAllString(l, ""))
		if len(f) != 2 || !isIdent(f[0]) {
			return nil, fmt.Errorf("%s:%d: %q: want -- name: <Name> <kind>", file, i+1, l)
		}
		k := Kind(f[1])
		switch k {
		case One, Many, Exec, ExecRows, Fragment:
		default:
			return nil, fmt.Errorf("%s:%d: query %s: unknown kind %q", file, i+1, f[0], f[1])
		}
		out = append(out, Query{Name: f[0], Kind: k, File: file, Line: i + 1})
	}
	for i, q := range out {
		bare, err := fill(q.Text, func(string) (string, error) { return "x", nil })
		if err != nil {
			return nil, fmt.Errorf("%s:%d: query %s: %w", file, q.Line, q.Name, err)
		}
		if bare == "" {
			return nil, fmt.Errorf("%s:%d: query %s has no SQL", file, q.Line, q.Name)
		}
		out[i].Text = strings.TrimSpace(q.Text) + "\n"
	}
	return out, nil
}

// Set is the named queries of a directory's .sql files.
type Set struct {
	dir     string
	queries map[string]Query
	names   []string
}

// Load parses every .sql file in dir of fsys (an embed.FS, usually with
// dir "sql"). A name given twice, in one file or two, is an error.
func Load(fsys fs.FS, dir string) (*Set, error) {
	files, err := fs.Glob(fsys, path.Join(dir, "*.sql"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no .sql files", dir)
	}
	s := &Set{dir: dir, queries: map[string]Query{}}
	for _, f := range files {
		b, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, err
		}
		qs, err := Parse(f, string(b))
		if err != nil {
			return nil, err
		}
		for _, q := range qs {
			if prev, ok := s.queries[q.Name]; ok {
				return nil, fmt.Errorf("%s:%d: query %s is named at %s:%d already", q.File, q.Line, q.Name, prev.File, prev.Line)
			}
			s.queries[q.Name] = q
			s.names = append(s.names, q.Name)
		}
	}
	return s, nil
}

// MustLoad is Load for files embedded in the binary, loaded when their
// package is initialized: a file that does not parse is a bug of the
// package, which its tests catch, so it panics.
func MustLoad(fsys fs.FS, dir string) *Set {
	s, err := Load(fsys, dir)
	if err != nil {
		panic(err)
	}
	return s
}

// Queries returns the set's queries, in file and then text order.
func (s *Set) Queries() []Query {
	out := make([]Query, len(s.names))
	for i, n := range s.names {
		out[i] = s.queries[n]
	}
	return out
}

// query returns the query name.
func (s *Set) query(name string) (Query, error) {
	q, ok := s.queries[name]
	if !ok {
		return Query{}, fmt.Errorf("%s: no query named %s", s.dir, name)
	}
	return q, nil
}

// Fill returns the query name with its slots filled in and its comments
// dropped; @name arguments are left as they are (a fragment's arguments
// are bound by the statement it goes into).
func (s *Set) Fill(name string, slots map[string]string) (string, error) {
	q, err := s.query(name)
	if err != nil {
		return "", err
	}
	text, err := FillSlots(q.Text, slots)
	if err != nil {
		return "", fmt.Errorf("%s:%d: query %s: %w", q.File, q.Line, name, err)
	}
	return text, nil
}

// MustFill is Fill for fragments filled once when their package is
// initialized, from files embedded in the binary: one that does not fill
// is a bug of the package, which its tests catch, so it panics.
func (s *Set) MustFill(name string, slots map[string]string) string {
	text, err := s.Fill(name, slots)
	if err != nil {
		panic(err)
	}
	return text
}

// Render renders the statement name of s with slots, A's fields as its
// arguments. A fragment is no statement: rendering one is an error.
func Render[A any](s *Set, name string, slots map[string]string) (Stmt[A], error) {
	text, err := s.Fill(name, slots)
	if err != nil {
		return Stmt[A]{}, err
	}
	q := s.queries[name]
	if q.Kind == Fragment {
		return Stmt[A]{}, fmt.Errorf("%s:%d: query %s is a fragment, not a statement", q.File, q.Line, name)
	}
	var a A
	sql, err := BindArgs(text, reflect.TypeOf(a))
	if err != nil {
		return Stmt[A]{}, fmt.Errorf("%s:%d: query %s: %w", q.File, q.Line, name, err)
	}
	return Stmt[A]{SQL: sql}, nil
}

// MustRender is Render for statements rendered once when their package is
// initialized, from files embedded in the binary: a statement that does
// not render is a bug of the package, which its tests catch, so it panics.
func MustRender[A any](s *Set, name string, slots map[string]string) Stmt[A] {
	st, err := Render[A](s, name, slots)
	if err != nil {
		panic(err)
	}
	return st
}

// Renderer renders statements of Set with Slots until the first error,
// which it keeps in Err: a caller renders all its statements, then checks
// Err once.
type Renderer struct {
	Set   *Set
	Slots map[string]string
	Err   error
}

// Into renders the statement name into st unless r failed already.
func Into[A any](r *Renderer, st *Stmt[A], name string) {
	if r.Err != nil {
		return
	}
	*st, r.Err = Render[A](r.Set, name, r.Slots)
}

// With returns a copy of slots with the pairs of more (name, value, name,
// value, ...) set over them.
func With(slots map[string]string, more ...string) map[string]string {
	out := make(map[string]string, len(slots)+len(more)/2)
	for k, v := range slots {
		out[k] = v
	}
	for i := 0; i+1 < len(more); i += 2 {
		out[more[i]] = more[i+1]
	}
	return out
}

// FillSlots replaces every /* TEMPLATE: name */ in text by slots[name],
// drops the other comments and the lines left empty, and trims what is
// left.
func FillSlots(text string, slots map[string]string) (string, error) {
	return fill(text, func(name string) (string, error) {
		v, ok := slots[name]
		if !ok {
			return "", fmt.Errorf("no value for slot %q", name)
		}
		return v, nil
	})
}

// fill is FillSlots with slot giving each slot's value.
func fill(text string, slot func(name string) (string, error)) (string, error) {
	var out strings.Builder
	for i := 0; i < len(text); {
		switch {
		case strings.HasPrefix(text[i:], "--"):
			end := strings.IndexByte(text[i:], '\n')
			if end < 0 {
				end = len(text) - i
			}
			i += end
		case strings.HasPrefix(text[i:], "/*"):
			end := strings.Index(text[i:], "*/")
			if end < 0 {
				return "", fmt.Errorf("unterminated comment at byte %d", i)
			}
			body := strings.TrimSpace(text[i+2 : i+end])
			i += end + 2
			name, ok := strings.CutPrefix(body, "TEMPLATE:")
			if !ok {
				continue
			}
			v, err := slot(strings.TrimSpace(name))
			if err != nil {
				return "", err
			}
			out.WriteString(v)
		case text[i] == '\'' || text[i] == '"':
			n, err := quotedLen(text[i:])
			if err != nil {
				return "", err
			}
			out.WriteString(text[i : i+n])
			i += n
		default:
			out.WriteByte(text[i])
			i++
		}
	}
	var lines []string
	for _, l := range strings.Split(out.String(), "\n") {
		if l = strings.TrimRight(l, " \t"); strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n"), nil
}

// quotedLen returns the length of the string literal or quoted identifier
// text starts with ('...' or "...", the quote doubled inside).
func quotedLen(text string) (int, error) {
	q := text[0]
	for i := 1; i < len(text); i++ {
		if text[i] != q {
			continue
		}
		if i+1 < len(text) && text[i+1] == q {
			i++
			continue
		}
		return i + 1, nil
	}
	return 0, fmt.Errorf("unterminated %c", q)
}

// BindArgs replaces every @name in text by $n, n the position of the
// field of args (a struct) tagged `arg:"name"`. Every field must be
// tagged and used.
func BindArgs(text string, args reflect.Type) (string, error) {
	pos := map[string]int{}
	for i := 0; i < args.NumField(); i++ {
		f := args.Field(i)
		name := f.Tag.Get("arg")
		if name == "" {
			return "", fmt.Errorf("%s.%s has no arg tag", args, f.Name)
		}
		pos[name] = i + 1
	}
	used := map[string]bool{}
	var out strings.Builder
	for i := 0; i < len(text); {
		switch {
		case text[i] == '\'' || text[i] == '"':
			n, err := quotedLen(text[i:])
			if err != nil {
				return "", err
			}
			out.WriteString(text[i : i+n])
			i += n
		case text[i] == '@' && i+1 < len(text) && identStart(text[i+1]):
			j := i + 1
			for j < len(text) && identPart(text[j]) {
				j++
			}
			name := text[i+1 : j]
			n, ok := pos[name]
			if !ok {
				return "", fmt.Errorf("@%s is no field of %s", name, args)
			}
			used[name] = true
			out.WriteString("$" + strconv.Itoa(n))
			i = j
		default:
			out.WriteByte(text[i])
			i++
		}
	}
	for name := range pos {
		if !used[name] {
			return "", fmt.Errorf("%s has a field for @%s, which the statement does not use", args, name)
		}
	}
	return out.String(), nil
}

func identStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func identPart(c byte) bool { return identStart(c) || c >= '0' && c <= '9' }

// isIdent reports whether s is a name: a letter or '_', then letters,
// digits and '_'.
func isIdent(s string) bool {
	if s == "" || !identStart(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !identPart(s[i]) {
			return false
		}
	}
	return true
}

// leftoverRE matches what a rendered statement must not hold: a template
// slot, a named argument, a comment.
var leftoverRE = regexp.MustCompile(`TEMPLATE|@[A-Za-z_]|--|/\*`)

// quotedRE matches quoted identifiers and string literals, which may hold
// anything.
var quotedRE = regexp.MustCompile(`'[^']*'|"[^"]*"`)

// Leftover reports whether a rendered statement still holds a template
// slot, a named argument or a comment outside its quoted identifiers and
// literals: the render tests of every package that keeps SQL in files
// check each statement with it.
func Leftover(sql string) bool {
	return leftoverRE.MatchString(quotedRE.ReplaceAllString(sql, ""))
}

// Columns returns pointers to the fields of dst, a pointer to a struct
// whose fields are tagged `db:"column"` (`db:"-"` or no tag: not a
// column), in the order of the columns fields describes: scanning each
// row into them reads the row by column name at the cost of a positional
// scan, as the name lookup is done once per result rather than per row
// (what pgx.RowToStructByName does). A column without a field and a
// field without a column are errors.
func Columns(fields []pgconn.FieldDescription, dst any) ([]any, error) {
	v := reflect.ValueOf(dst)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("columns: %T is not a pointer to a struct", dst)
	}
	v = v.Elem()
	byName := map[string]any{}
	for i := 0; i < v.NumField(); i++ {
		if tag := v.Type().Field(i).Tag.Get("db"); tag != "" && tag != "-" {
			byName[tag] = v.Field(i).Addr().Interface()
		}
	}
	out := make([]any, len(fields))
	for i, f := range fields {
		p, ok := byName[f.Name]
		if !ok {
			return nil, fmt.Errorf("columns: column %q has no field in %s", f.Name, v.Type())
		}
		out[i] = p
		delete(byName, f.Name)
	}
	for name := range byName {
		return nil, fmt.Errorf("columns: %s has a field for column %q, which the rows do not have", v.Type(), name)
	}
	return out, nil
}
