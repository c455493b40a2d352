package jsonbody

import (
	"errors"
	"math"
	"strconv"
	"strings"
)

// MaxExactInt is the largest magnitude up to which a double holds every
// integer exactly: 2^53-1 (JavaScript's Number.MAX_SAFE_INTEGER). 2^53
// itself is exact, but so is what 2^53+1 rounds to, so it cannot be told
// apart from a rounded integer.
const MaxExactInt = 1<<53 - 1

// NumberError is a number in a body that a double cannot hold exactly.
type NumberError struct {
	// Number is the number as sent, Path where it is, e.g.
	// "statements[0].params[1]" ("" at the top level).
	Number, Path string
	// OutOfRange: beyond a double's range, not just its precision.
	OutOfRange bool
}

func (e *NumberError) Error() string {
	where := ""
	if e.Path != "" {
		where = " at " + e.Path
	}
	if e.OutOfRange {
		return "jsonbody: the number " + e.Number + where + " is out of range"
	}
	return "jsonbody: the number " + e.Number + where + " is an integer beyond ±(2^53-1), which a JSON number does not carry exactly; send it as a string: \"" + e.Number + "\""
}

// CheckNumbers returns a *NumberError for the first number in body that a
// double cannot hold exactly: an integer beyond ±(2^53-1), or anything that
// rounds to one, or beyond a double's range. It reads body as JSON text
// without validating it (protojson does) and does not allocate unless it
// finds one.
func CheckNumbers(body []byte) error {
	for i := 0; i < len(body); i++ {
		switch c := body[i]; {
		case c == '"':
			i = stringEnd(body, i)
		case c == '-' || ('0' <= c && c <= '9'):
			j := numberEnd(body, i)
			if ok, inRange := exact(body[i:j]); !ok {
				return &NumberError{Number: string(body[i:j]), Path: pathAt(body, i), OutOfRange: !inRange}
			}
			i = j - 1
		}
	}
	return nil
}

// stringEnd returns the index of the quote closing the string opened at
// body[i], or len(body).
func stringEnd(body []byte, i int) int {
	for i++; i < len(body); i++ {
		switch body[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return len(body)
}

// numberEnd returns the end of the number token starting at body[i].
func numberEnd(body []byte, i int) int {
	for i++; i < len(body); i++ {
		switch c := body[i]; {
		case '0' <= c && c <= '9', c == '.', c == 'e', c == 'E', c == '+', c == '-':
		default:
			return i
		}
	}
	return i
}

// exact reports whether the number tok is held exactly by a double if it
// is an integer (and is not near an integer beyond 2^53-1 at all), and
// whether it is within a double's range. A malformed number counts as
// exact: protojson refuses it with its own message.
func exact(tok []byte) (ok, inRange bool) {
	digits := 0
	for _, c := range tok {
		switch {
		case '0' <= c && c <= '9':
			digits++
		case c == '-':
		default:
			digits = 100 // a fraction or exponent: parse it
		}
	}
	if digits <= 15 { // below 10^15 < 2^53
		return true, true
	}
	f, err := strconv.ParseFloat(string(tok), 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) && math.IsInf(f, 0) {
			return false, false
		}
		return true, true
	}
	return math.Abs(f) <= MaxExactInt, true
}

// pathAt returns where in body the value starting at offset off is, as a
// path like statements[0].params[1]. Only called on the way to an error.
func pathAt(body []byte, off int) string {
	type frame struct {
		array bool
		index int
		key   string
	}
	var stack []frame
	wantKey := false
	for i := 0; i < off && i < len(body); i++ {
		switch body[i] {
		case '"':
			end := stringEnd(body, i)
			if wantKey && len(stack) > 0 {
				k, err := strconv.Unquote(string(body[i:min(end+1, len(body))]))
				if err != nil {
					k = string(body[i+1 : min(end, len(body))])
				}
				stack[len(stack)-1].key = k
				wantKey = false
			}
			i = end
		case '{':
			stack = append(stack, frame{})
			wantKey = true
		case '[':
			stack = append(stack, frame{array: true})
		case '}', ']':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		case ',':
			if len(stack) > 0 {
				if top := &stack[len(stack)-1]; top.array {
					top.index++
				} else {
					wantKey = true
				}
			}
		}
	}
	var b strings.Builder
	for _, f := range stack {
		if f.array {
			b.WriteString("[" + strconv.Itoa(f.index) + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(f.key)
	}
	return b.String()
}
