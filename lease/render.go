package lease

import (
	"embed"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// The Claimer's SQL lives in sql/*.sql, one statement (or one fragment of
// statements) per file, each readable on its own and explained by its own
// SQL comments. Two kinds of markers stand for what differs between
// Claimers:
//
//   - /* TEMPLATE: name */ is a slot: the table, the tables beside it, the
//     configured columns and a few SQL fragments (the row address, the
//     key partition expression, the plan settings, ...), all quoted with
//     internal/sqlname. statements.go lists them.
//   - @name is a named argument. Each statement's arguments are the
//     fields of one Go struct, tagged `arg:"name"`: the field's position
//     is the argument's $n, so callers fill in fields by name and the
//     statement builds the positional list.
//
// render substitutes both once, when New builds the Claimer's statements,
// and drops the comments, so a statement sent to the server is the bare
// SQL and the hot path rewrites nothing. A slot without a value, an
// argument without a field and a field the statement does not use are
// errors of render. To run a statement in psql, replace each slot by the
// name it stands for (outbox, outbox_relays, ...: see statements.go) and
// each @name by a value.

//go:embed sql/*.sql
var sqlFiles embed.FS

// noArgs is the argument struct of a statement without arguments.
type noArgs struct{}

// stmt is one rendered statement whose $1, $2, ... are the fields of A in
// order.
type stmt[A any] struct {
	sql string
}

// args returns a's fields, in order: the statement's positional
// arguments.
func (s stmt[A]) args(a A) []any {
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

// renderStmt renders sql/<name>.sql with slots and A's fields as its
// arguments.
func renderStmt[A any](name string, slots map[string]string) (stmt[A], error) {
	text, err := renderFile(name, slots)
	if err != nil {
		return stmt[A]{}, err
	}
	var a A
	sql, err := bindArgs(text, reflect.TypeOf(a))
	if err != nil {
		return stmt[A]{}, fmt.Errorf("sql/%s.sql: %w", name, err)
	}
	return stmt[A]{sql: sql}, nil
}

// renderFile returns sql/<name>.sql with its slots filled in and its
// comments dropped; @name arguments are left as they are (a fragment's
// arguments are bound by the statement it goes into).
func renderFile(name string, slots map[string]string) (string, error) {
	b, err := sqlFiles.ReadFile("sql/" + name + ".sql")
	if err != nil {
		return "", err
	}
	text, err := fillSlots(string(b), slots)
	if err != nil {
		return "", fmt.Errorf("sql/%s.sql: %w", name, err)
	}
	return text, nil
}

// fillSlots replaces every /* TEMPLATE: name */ in text by slots[name],
// drops the other comments and the lines left empty, and trims what is
// left.
func fillSlots(text string, slots map[string]string) (string, error) {
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

// bindArgs replaces every @name in text by $n, n the position of the
// field of args (a struct) tagged `arg:"name"`. Every field must be
// tagged and used.
func bindArgs(text string, args reflect.Type) (string, error) {
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
