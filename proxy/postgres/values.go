package postgres

import (
	"bytes"
	"database/sql/driver"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// maxExactInt is the largest integer a float64 (and so a JSON number in most
// clients) holds exactly.
const maxExactInt = 1 << 53

// param converts a JSON-decoded value into what pgx encodes best: integral
// float64 and json.Number become int64 so they fit integer columns; maps and
// slices stay as they are, for json/jsonb parameters.
func param(v any) any {
	switch x := v.(type) {
	case float64:
		if x == math.Trunc(x) && x >= -maxExactInt && x <= maxExactInt {
			return int64(x)
		}
		return x
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		if f, err := x.Float64(); err == nil {
			return f
		}
		return string(x)
	}
	return v
}

// Type OIDs whose Go values need the column type to be rendered well.
const (
	dateOID        = 1082
	timestampOID   = 1114
	timestamptzOID = 1184
	jsonOID        = 114
	jsonbOID       = 3802
	jsonArrayOID   = 199
	jsonbArrayOID  = 3807
)

// jsonValue converts a value decoded by pgx into one encoding/json renders
// faithfully: integers beyond ±2^53 as decimal strings, numeric as a
// string, times as RFC 3339 strings, bytea as base64, uuid in its text form,
// a json or jsonb number as jsonNumber says.
func jsonValue(v any, oid uint32) any {
	switch x := v.(type) {
	case nil, bool, string, int16, int32, int8, uint8, uint16:
		return v
	case json.Number:
		return jsonNumber(x)
	case int64:
		if x > maxExactInt || x < -maxExactInt {
			return strconv.FormatInt(x, 10)
		}
		return x
	case uint32:
		return int64(x)
	case float32:
		return jsonFloat(float64(x))
	case float64:
		return jsonFloat(x)
	case time.Time:
		switch oid {
		case dateOID:
			return x.Format(time.DateOnly)
		case timestampOID:
			return x.Format("2006-01-02T15:04:05.999999999")
		}
		return x.Format(time.RFC3339Nano)
	case []byte:
		return base64.StdEncoding.EncodeToString(x)
	case [16]byte:
		return fmt.Sprintf("%x-%x-%x-%x-%x", x[0:4], x[4:6], x[6:8], x[8:10], x[10:16])
	case pgtype.Numeric:
		return numericString(x)
	case map[string]any:
		for k, e := range x {
			x[k] = jsonValue(e, 0)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = jsonValue(e, elemOID(oid))
		}
		return x
	case *big.Int:
		return x.String()
	case fmt.Stringer:
		return fmt.Sprint(x)
	case driver.Valuer:
		dv, err := x.Value()
		if err != nil {
			return fmt.Sprint(x)
		}
		return jsonValue(dv, oid)
	}
	return fmt.Sprint(v)
}

func jsonFloat(f float64) any {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return strconv.FormatFloat(f, 'g', -1, 64) // JSON has no NaN or ∞
	}
	return f
}

func numericString(n pgtype.Numeric) any {
	if !n.Valid {
		return nil
	}
	v, err := n.Value() // text form, exact
	if err != nil {
		return fmt.Sprint(n)
	}
	return v
}

// elemOID maps an array type to its element type for the types jsonValue
// treats specially.
func elemOID(oid uint32) uint32 {
	switch oid {
	case 1182:
		return dateOID
	case 1115:
		return timestampOID
	case 1185:
		return timestamptzOID
	}
	return 0
}

// jsonNumber renders a number of a json or jsonb value as the API renders
// int8 and numeric: a float64 when the float's shortest text is the same
// number (every integer within ±2^53, and 0.5 or 1.0), else the number's
// own text as a string. jsonb holds numbers as numeric, so
// 9007199254740993 or 0.10000000000000001 would read back rounded.
func jsonNumber(n json.Number) any {
	s := string(n)
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		if i > maxExactInt || i < -maxExactInt {
			return s
		}
		return float64(i)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return s // beyond float64's range
	}
	var buf [32]byte
	short := strconv.AppendFloat(buf[:0], f, 'g', -1, 64)
	if string(short) == s || sameDecimal(s, string(short)) {
		return f
	}
	return s
}

// sameDecimal reports whether two JSON number texts are the same number
// ("1.50" and "1.5", "100" and "1e+02"), without rounding either.
func sameDecimal(a, b string) bool {
	x, okx := splitDecimal(a)
	y, oky := splitDecimal(b)
	switch {
	case !okx || !oky:
		return false
	case x.n == 0 || y.n == 0:
		return x.n == y.n
	case x.neg != y.neg || x.n != y.n || x.point != y.point:
		return false
	}
	for k := range x.n {
		if x.digit(k) != y.digit(k) {
			return false
		}
	}
	return true
}

// decimal is a number's text as 0.d₁d₂…dₙ × 10^point, its significant
// digits read from mant (which may hold a '.') past the leading zeros.
type decimal struct {
	neg   bool
	mant  string
	dot   int // index of '.' in mant, or len(mant)
	lead  int // leading zero digits
	n     int // significant digits
	point int
}

// digit is the kth significant digit.
func (d decimal) digit(k int) byte { return d.digitAt(d.lead + k) }

// splitDecimal parses a JSON number's text; ok is false for an exponent
// out of int's range.
func splitDecimal(s string) (d decimal, ok bool) {
	if s != "" && s[0] == '-' {
		d.neg, s = true, s[1:]
	}
	exp := 0
	if e := strings.IndexAny(s, "eE"); e >= 0 {
		var err error
		if exp, err = strconv.Atoi(s[e+1:]); err != nil || exp > 1<<30 || exp < -1<<30 {
			return d, false
		}
		s = s[:e]
	}
	d.mant, d.dot = s, len(s)
	if i := strings.IndexByte(s, '.'); i >= 0 {
		d.dot = i
	}
	digits := len(s)
	if d.dot < len(s) {
		digits--
	}
	for d.lead < digits && d.digitAt(d.lead) == '0' {
		d.lead++
	}
	trail := 0
	for trail < digits-d.lead && d.digitAt(digits-1-trail) == '0' {
		trail++
	}
	d.n = digits - d.lead - trail
	d.point = d.dot - d.lead + exp
	return d, true
}

// digitAt is the ith digit of mant, the '.' skipped.
func (d decimal) digitAt(i int) byte {
	if i >= d.dot {
		i++
	}
	return d.mant[i]
}

// decodeJSON decodes a json or jsonb value as pgx's codecs do, but with
// its numbers as json.Number: pgx's decode into float64 would round
// integers beyond 2^53.
func decodeJSON(oid uint32, format int16, src []byte) (any, error) {
	if oid == jsonbOID && format == pgtype.BinaryFormatCode {
		if len(src) == 0 || src[0] != 1 {
			return nil, errors.New("jsonb: unknown binary version")
		}
		src = src[1:]
	}
	d := json.NewDecoder(bytes.NewReader(src))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("json: data after the value")
	}
	return v, nil
}

// jsonElem is one element of a json[] or jsonb[] value.
type jsonElem struct{ v any }

// ScanBytes implements pgtype.BytesScanner; a jsonb element comes without
// its version byte, and a NULL one as nil.
func (e *jsonElem) ScanBytes(src []byte) error {
	if src == nil {
		e.v = nil
		return nil
	}
	v, err := decodeJSON(jsonOID, pgtype.TextFormatCode, src)
	e.v = v
	return err
}

// decodeJSONArray decodes a json[] or jsonb[] value flat, as pgx decodes an
// array into []any, its elements as decodeJSON does.
func decodeJSONArray(m *pgtype.Map, oid uint32, format int16, src []byte) (any, error) {
	var elems []jsonElem
	if err := m.PlanScan(oid, format, &elems).Scan(src, &elems); err != nil {
		return nil, err
	}
	if elems == nil {
		return []any(nil), nil
	}
	out := make([]any, len(elems))
	for i := range elems {
		out[i] = elems[i].v
	}
	return out, nil
}
