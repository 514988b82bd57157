package outbox

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf8"
)

// PostgreSQL refuses some values that Go and JSON allow, and a refused
// INSERT aborts the caller's transaction (SQLSTATE 25P02 on its next
// statement), losing the business change with the event. The writer
// refuses them first, with a *ValidationError.

// textProblem says why PostgreSQL's text type (in a UTF8 database) would
// refuse s, or "" if it would not: text cannot hold a NUL byte, and
// every string must be valid UTF-8 (SQLSTATE 22021).
func textProblem(s string) string {
	if strings.IndexByte(s, 0) >= 0 {
		return "contains a NUL byte (\\x00), which PostgreSQL text cannot hold"
	}
	if !utf8.ValidString(s) {
		return "is not valid UTF-8"
	}
	return ""
}

// jsonbProblem says why PostgreSQL's jsonb would refuse raw, valid JSON
// by Go's json.Valid, or "" if it would not (numbers are checked by
// jsonbTextLen): invalid UTF-8, which json.Valid accepts (SQLSTATE
// 22021); a \u0000 escape, which jsonb cannot store as text (22P05
// "unsupported Unicode escape sequence"); a surrogate escape that is not
// a high surrogate followed by a low one (22P02, "Unicode low surrogate
// must follow a high surrogate"), which json.Valid accepts. Every
// backslash of valid JSON is in a string and starts an escape, so one pass
// over the backslashes finds the \u escapes without tracking strings.
func jsonbProblem(raw []byte) string {
	if !utf8.Valid(raw) {
		return "not valid UTF-8"
	}
	for i := 0; ; {
		j := bytes.IndexByte(raw[i:], '\\')
		if j < 0 {
			return ""
		}
		i += j
		if i+1 >= len(raw) || raw[i+1] != 'u' {
			i += 2 // \" \\ \/ \b \f \n \r \t
			continue
		}
		r, ok := hex4(raw[i+2:])
		if !ok { // json.Valid refuses it first
			return "a \\u escape without 4 hex digits"
		}
		switch {
		case r == 0:
			return "contains the escape \\u0000, which PostgreSQL jsonb refuses (its text cannot hold a NUL)"
		case r >= 0xdc00 && r <= 0xdfff:
			return fmt.Sprintf("contains the escape \\u%04x, a low surrogate without a high surrogate before it, which PostgreSQL jsonb refuses", r)
		case r >= 0xd800 && r <= 0xdbff:
			low, ok := rune(0), false
			if i+7 < len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' {
				low, ok = hex4(raw[i+8:])
			}
			if !ok || low < 0xdc00 || low > 0xdfff {
				return fmt.Sprintf("contains the escape \\u%04x, a high surrogate not followed by a low surrogate escape, which PostgreSQL jsonb refuses", r)
			}
			i += 12
		default:
			i += 6
		}
	}
}

// hex4 decodes the 4 hex digits at the start of b.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
