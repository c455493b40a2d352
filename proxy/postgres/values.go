package postgres

import (
	"database/sql/driver"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"
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
)

// jsonValue converts a value decoded by pgx into one encoding/json renders
// faithfully: integers beyond ±2^53 as decimal strings, numeric as a
// string, times as RFC 3339 strings, bytea as base64, uuid in its text form.
func jsonValue(v any, oid uint32) any {
	switch x := v.(type) {
	case nil, bool, string, int16, int32, int8, uint8, uint16:
		return v
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
