// Package sqlfile renders the project's SQL, kept in .sql files (each
// package embeds its own, e.g. //go:embed sql/*.sql), one statement or
// one fragment of a statement per file, readable on its own and explained
// by its own SQL comments. Two kinds of markers stand for what differs
// between uses:
//
//   - /* TEMPLATE: name */ is a slot: the table, the tables beside it, the
//     configured columns, a few SQL fragments, all quoted with
//     internal/sqlname by the caller.
//   - @name is a named argument. A statement's arguments are the fields
//     of one Go struct, tagged `arg:"name"`: a field's position is its
//     argument's $n, so callers fill in fields by name and Stmt.Args
//     builds the positional list.
//
// Rendering substitutes both once (callers render when they are built,
// never per call) and drops the comments, so the statement sent to the
// server is the bare SQL. A slot without a value, an argument without a
// field and a field the statement does not use are errors. To run a
// statement in psql, replace each slot by the name it stands for and each
// @name by a value.
package sqlfile

import (
	"fmt"
	"io/fs"
	"reflect"
	"regexp"
	"strconv"
	"strings"
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

// Files is a directory of .sql files.
type Files struct {
	fsys fs.FS
	dir  string
}

// NewFiles returns the .sql files in dir of fsys (an embed.FS, usually
// with dir "sql").
func NewFiles(fsys fs.FS, dir string) Files { return Files{fsys: fsys, dir: dir} }

// Fill returns <dir>/<name>.sql with its slots filled in and its comments
// dropped; @name arguments are left as they are (a fragment's arguments
// are bound by the statement it goes into).
func (f Files) Fill(name string, slots map[string]string) (string, error) {
	path := f.dir + "/" + name + ".sql"
	b, err := fs.ReadFile(f.fsys, path)
	if err != nil {
		return "", err
	}
	text, err := FillSlots(string(b), slots)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return text, nil
}

// Render renders <dir>/<name>.sql of f with slots, A's fields as its
// arguments.
func Render[A any](f Files, name string, slots map[string]string) (Stmt[A], error) {
	text, err := f.Fill(name, slots)
	if err != nil {
		return Stmt[A]{}, err
	}
	var a A
	sql, err := BindArgs(text, reflect.TypeOf(a))
	if err != nil {
		return Stmt[A]{}, fmt.Errorf("%s/%s.sql: %w", f.dir, name, err)
	}
	return Stmt[A]{SQL: sql}, nil
}

// MustRender is Render for statements rendered once when their package is
// initialized, from files embedded in the binary: a file that does not
// render is a bug of the package, which its tests catch, so it panics.
func MustRender[A any](f Files, name string, slots map[string]string) Stmt[A] {
	s, err := Render[A](f, name, slots)
	if err != nil {
		panic(err)
	}
	return s
}

// Renderer renders statements of Files with Slots until the first error,
// which it keeps in Err: a caller renders all its statements, then checks
// Err once.
type Renderer struct {
	Files Files
	Slots map[string]string
	Err   error
}

// Into renders <name>.sql into s unless r failed already.
func Into[A any](r *Renderer, s *Stmt[A], name string) {
	if r.Err != nil {
		return
	}
	*s, r.Err = Render[A](r.Files, name, r.Slots)
}

// FillSlots replaces every /* TEMPLATE: name */ in text by slots[name],
// drops the other comments and the lines left empty, and trims what is
// left.
func FillSlots(text string, slots map[string]string) (string, error) {
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
			name = strings.TrimSpace(name)
			v, ok := slots[name]
			if !ok {
				return "", fmt.Errorf("no value for slot %q", name)
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
