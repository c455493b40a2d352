package jsonbody_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math/big"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	fencegatev1 "github.com/fencegate/fencegate/api/gen/fencegate/v1"
	"github.com/fencegate/fencegate/api/internal/jsonbody"
)

// FuzzDecodeBody decodes arbitrary bodies as ExecRequest and RedisRequest
// the way the HTTP API does. It must never panic, and a body it accepts
// must hold every integer it carries exactly: each number literal whose
// value is an integer is equal to the double it decoded to, and no decoded
// integral number is beyond ±(2^53-1).
func FuzzDecodeBody(f *testing.F) {
	for _, s := range []string{
		exec(`7, "done"`),
		exec("12345678901234567"),
		exec(`"12345678901234567"`),
		exec("1e400"),
		exec("-0"),
		exec("18446744073709551616"),
		exec(`"  42"`), exec(`"+42"`), exec(`"0x10"`),
		exec("9007199254740991"), exec("9007199254740992"), exec("9007199254740991.9"),
		exec(`{"a":[1,2.5,12345678901234567]}`),
		`{"statements":[{"sql":"SELECT 1"}]}`,
		`{"commands":[["SET","{jobs}:last",7],["INCRBY","{jobs}:n",12345678901234567]]}`,
		`{"commands":[["SET","{jobs}:x",1.5e300]]}`,
		`{"statements":[]} trailing`,
		`{"statements":[{"sql":"a\"12345678901234567","params":[1e-400]}]}`,
		``, ` `, `{`, `"`, `-`, `[1,`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, m := range []proto.Message{&fencegatev1.ExecRequest{}, &fencegatev1.RedisRequest{}} {
			err := codec.NewDecoder(bytes.NewReader(body)).Decode(m)
			if err != nil {
				if errors.Is(err, io.EOF) && len(bytes.TrimSpace(body)) != 0 {
					t.Errorf("Decode(%q): got io.EOF for a body that is not empty", body)
				}
				continue
			}
			checkLiterals(t, body)
			checkValues(t, body, m)
		}
	})
}

// checkLiterals checks every integer-valued number literal of an accepted
// body against the double protojson makes of it.
func checkLiterals(t *testing.T, body []byte) {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	for {
		tok, err := d.Token()
		if err != nil {
			return // protojson and encoding/json differ at the edges; nothing to check
		}
		n, ok := tok.(json.Number)
		if !ok || len(n) > 400 {
			continue
		}
		exact, _, err := big.ParseFloat(string(n), 10, 4096, big.ToNearestEven)
		if err != nil || !exact.IsInt() {
			continue
		}
		f, _ := exact.Float64()
		if new(big.Float).SetPrec(4096).SetFloat64(f).Cmp(exact) != 0 {
			t.Errorf("Decode(%q): accepted the integer %s, which the double %v does not hold", body, n, f)
		}
	}
}

// checkValues checks that no decoded number is an integer beyond ±(2^53-1).
func checkValues(t *testing.T, body []byte, m proto.Message) {
	t.Helper()
	var vs []*structpb.Value
	switch r := m.(type) {
	case *fencegatev1.ExecRequest:
		for _, s := range r.GetStatements() {
			vs = append(vs, s.GetParams()...)
		}
	case *fencegatev1.RedisRequest:
		for _, c := range r.GetCommands() {
			vs = append(vs, c.GetValues()...)
		}
	}
	for len(vs) > 0 {
		v := vs[len(vs)-1]
		vs = vs[:len(vs)-1]
		switch k := v.GetKind().(type) {
		case *structpb.Value_NumberValue:
			if x := k.NumberValue; x > jsonbody.MaxExactInt || x < -jsonbody.MaxExactInt {
				t.Errorf("Decode(%q): got the number %v, beyond ±(2^53-1)", body, x)
			}
		case *structpb.Value_ListValue:
			vs = append(vs, k.ListValue.GetValues()...)
		case *structpb.Value_StructValue:
			for _, e := range k.StructValue.GetFields() {
				vs = append(vs, e)
			}
		}
	}
}
