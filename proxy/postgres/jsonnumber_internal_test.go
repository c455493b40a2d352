package postgres

import (
	"encoding/json"
	"testing"
)

// TestJSONNumber: a number inside a json or jsonb result is a float64
// only when the float is the same number, else its own text.
func TestJSONNumber(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want any
	}{
		{"0", float64(0)},
		{"-0", float64(0)},
		{"1", float64(1)},
		{"9007199254740992", float64(9007199254740992)},
		{"-9007199254740992", float64(-9007199254740992)},
		{"9007199254740993", "9007199254740993"},
		{"-9007199254740993", "-9007199254740993"},
		{"18446744073709551616", "18446744073709551616"},
		{"1.5", 1.5},
		{"1.50", 1.5},
		{"0.1", 0.1},
		{"1e2", float64(100)},
		{"1E+2", float64(100)},
		{"100.000", float64(100)},
		{"0.10000000000000001", "0.10000000000000001"},
		{"1.000000000000000000001", "1.000000000000000000001"},
		{"12.345678901234567890", "12.345678901234567890"},
		{"1e400", "1e400"},
		{"-1e400", "-1e400"},
		{"1e-400", "1e-400"},
		{"5e-324", 5e-324},
		{"1e99999999999", "1e99999999999"},
	} {
		got := jsonNumber(json.Number(tc.in))
		if got != tc.want {
			t.Errorf("jsonNumber(%s) = %#v, want %#v", tc.in, got, tc.want)
		}
	}
}
