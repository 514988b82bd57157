package outbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// jsonbTextLen returns the length in bytes of raw (valid JSON) as
// PostgreSQL prints it after storing it as jsonb (jsonb_out, the text the
// relay publishes as the Kafka value). That text differs from what the
// application wrote: insignificant whitespace is dropped, elements and keys
// are followed by ", " and ": " (JsonbToCString), string escapes are
// normalized (escape_json: only ", \, \b \f \n \r \t and \u00XX for other
// control characters are escaped; \u escapes of anything else are printed
// as UTF-8), and numbers are printed as numeric prints them, in plain
// notation with the input's display scale (1e3 is 1000, 1.50 is 1.50,
// 1e400 is 401 digits). So a payload can grow: [1,2,3] is 7 bytes written
// and 9 stored. jsonb keeps only the last of duplicate object keys; they
// are all counted here, so the result is exact without duplicate keys and
// an upper bound with them.
func jsonbTextLen(raw []byte) (int, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	type frame struct {
		object bool
		n      int // members or elements so far
		key    bool
	}
	var stack []frame
	total := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return total, nil
		}
		if err != nil {
			return 0, err
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
			total++
			continue
		}
		if len(stack) > 0 {
			top := &stack[len(stack)-1]
			switch {
			case top.object && !top.key:
				// tok is a key: ", " before all but the first, ": " after.
				if top.n > 0 {
					total += 2
				}
				top.n++
				top.key = true
				total += jsonStringLen(tok.(string)) + 2
				continue
			case top.object:
				top.key = false
			default:
				if top.n > 0 {
					total += 2
				}
				top.n++
			}
		}
		switch v := tok.(type) {
		case json.Delim: // '{' or '['
			stack = append(stack, frame{object: v == '{'})
			total++
		case string:
			total += jsonStringLen(v)
		case json.Number:
			n, err := numericLen(string(v))
			if err != nil {
				return 0, err
			}
			total += n
		case bool:
			if v {
				total += 4
			} else {
				total += 5
			}
		case nil:
			total += 4
		}
	}
}

// jsonStringLen is the length of s printed by PostgreSQL's escape_json,
// quotes included.
func jsonStringLen(s string) int {
	n := 2
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t':
			n += 2
		case c < 0x20:
			n += 6
		default:
			n++
		}
	}
	return n
}

// PostgreSQL's numeric limits (src/backend/utils/adt/numeric.c): at most
// NUMERIC_WEIGHT_MAX+1 = 32768 base-10000 digits before the decimal point,
// a display scale of at most NUMERIC_DSCALE_MAX = 16383, and an exponent
// whose magnitude is below INT_MAX/2 (set_var_from_str). jsonb stores
// numbers as numeric and refuses one outside them (SQLSTATE 22003, "value
// overflows numeric format").
const (
	numericMaxIntDigits = 32768 * 4
	numericMaxScale     = 0x3fff
	numericMaxExponent  = 1<<31/2 - 1
)

// numericRangeError is jsonbTextLen's error for a number jsonb refuses.
type numericRangeError struct{ lit string }

func (e *numericRangeError) Error() string {
	n := e.lit
	if len(n) > 40 {
		n = n[:37] + "..."
	}
	return fmt.Sprintf("the number %s is outside the range of PostgreSQL's numeric, which jsonb stores numbers as (at most %d digits before the decimal point and %d after)",
		n, numericMaxIntDigits, numericMaxScale)
}

// numericLen is the length of the JSON number lit as PostgreSQL's numeric
// prints it: plain notation, display scale max(0, fraction digits -
// exponent), no sign for zero. A number outside numeric's range is a
// *numericRangeError.
func numericLen(lit string) (int, error) {
	full := lit
	neg := strings.HasPrefix(lit, "-")
	lit = strings.TrimPrefix(lit, "-")
	mant, exp := lit, 0
	if i := strings.IndexAny(lit, "eE"); i >= 0 {
		mant = lit[:i]
		e, err := strconv.Atoi(strings.TrimPrefix(lit[i+1:], "+"))
		if errors.Is(err, strconv.ErrRange) || err == nil && (e >= numericMaxExponent || e <= -numericMaxExponent) {
			return 0, &numericRangeError{full}
		}
		if err != nil {
			return 0, fmt.Errorf("number %q: %w", lit, err)
		}
		exp = e
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	scale := len(frac) - exp
	if scale < 0 {
		scale = 0
	}
	if scale > numericMaxScale {
		return 0, &numericRangeError{full}
	}
	digits := intPart + frac
	// The decimal point sits after point digits of digits.
	point := len(intPart) + exp
	// Integer digits of the value, without leading zeros.
	zero := strings.Trim(digits, "0") == ""
	intDigits := 0
	if point > 0 && !zero {
		lead := 0
		for lead < len(digits) && lead < point && digits[lead] == '0' {
			lead++
		}
		intDigits = point - lead
	}
	if intDigits > numericMaxIntDigits {
		return 0, &numericRangeError{full}
	}
	n := intDigits
	if n == 0 {
		n = 1 // "0"
	}
	if scale > 0 {
		n += 1 + scale
	}
	if neg && !zero {
		n++
	}
	return n, nil
}
