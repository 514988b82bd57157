package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pgoutbox/outbox/internal/testenv"
)

// TestJSONBTextLenMatchesPostgres compares jsonbTextLen with what
// PostgreSQL prints for the same JSON stored as jsonb, for hand-picked
// cases (number notations, escapes, nesting, whitespace) and random
// documents.
func TestJSONBTextLenMatchesPostgres(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	cases := []string{
		`null`, `true`, `false`, `0`, `-0`, `-0.0`, `1`, `-1`, `1.50`, `1e3`, `1E+3`, `1.5e1`, `1.50e1`,
		`1e-3`, `1.5e-3`, `-2.5E-10`, `0e5`, `0.01e3`, `123.456e-2`, `1e400`, `-1e-400`, `12345678901234567890123`,
		`0.000`, `100e-2`, `""`, `"a"`, `"\"\\\/\b\f\n\r\t"`, `"\u0001\u001f"`, `"\u00e9\u20ac\ud83d\ude00"`, `"é€😀"`,
		`"<>&"`, `[]`, `{}`, `[1,2,3]`, ` [ 1 , [ ] , { } , "x" ] `, `{"a":1,"b":[true,false,null],"c":{"d":"e"}}`,
		`{"b":1,"a":2}`, `[[[[[]]]]]`, `{"":""}`, `[1.0, 2.00, -3e2]`, "\t{\n\"k\" :\r\n\"v\"\n}\n",
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		cases = append(cases, randomJSON(rng, 4))
	}
	for _, c := range cases {
		if !json.Valid([]byte(c)) {
			t.Fatalf("bad case %q", c)
		}
		want := 0
		if err := db.Pool.QueryRow(context.Background(), `SELECT octet_length($1::jsonb::text)`, c).Scan(&want); err != nil {
			t.Fatalf("%q: %v", c, err)
		}
		got, err := jsonbTextLen([]byte(c))
		if err != nil {
			t.Fatalf("%q: %v", c, err)
		}
		if got != want {
			t.Errorf("jsonbTextLen(%q) = %d, PostgreSQL prints %d bytes", c, got, want)
		}
	}
}

// randomJSON returns a random JSON document without duplicate keys.
func randomJSON(rng *rand.Rand, depth int) string {
	k := rng.IntN(9)
	if depth == 0 {
		k %= 5
	}
	switch k {
	case 0:
		return "null"
	case 1:
		return []string{"true", "false"}[rng.IntN(2)]
	case 2:
		return randomNumber(rng)
	case 3, 4:
		b, _ := json.Marshal(randomString(rng))
		return string(b)
	case 5, 6:
		n := rng.IntN(5)
		parts := make([]string, n)
		for i := range parts {
			parts[i] = randomJSON(rng, depth-1)
		}
		return "[" + strings.Join(parts, []string{",", ", ", " ,\n"}[rng.IntN(3)]) + "]"
	default:
		n := rng.IntN(5)
		parts := make([]string, n)
		for i := range parts {
			key, _ := json.Marshal(fmt.Sprintf("k%d%s", i, randomString(rng)))
			parts[i] = string(key) + []string{":", ": ", " :\t"}[rng.IntN(3)] + randomJSON(rng, depth-1)
		}
		return "{" + strings.Join(parts, ",") + "}"
	}
}

func randomNumber(rng *rand.Rand) string {
	var b strings.Builder
	if rng.IntN(3) == 0 {
		b.WriteByte('-')
	}
	if rng.IntN(4) == 0 {
		b.WriteByte('0')
	} else {
		fmt.Fprint(&b, rng.IntN(100000)+1)
	}
	if rng.IntN(2) == 0 {
		fmt.Fprintf(&b, ".%0*d", rng.IntN(4)+1, rng.IntN(100))
	}
	if rng.IntN(2) == 0 {
		fmt.Fprintf(&b, "%s%s%d", []string{"e", "E"}[rng.IntN(2)], []string{"", "+", "-"}[rng.IntN(3)], rng.IntN(30))
	}
	return b.String()
}

func randomString(rng *rand.Rand) string {
	alphabet := []string{"a", "Z", "0", " ", "\"", "\\", "/", "\n", "\t", "\x01", "\x1f", "é", "€", "😀", "<", "\u2028"}
	var b strings.Builder
	for range rng.IntN(8) {
		b.WriteString(alphabet[rng.IntN(len(alphabet))])
	}
	return b.String()
}
