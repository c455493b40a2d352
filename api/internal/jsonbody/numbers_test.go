package jsonbody_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/encoding/protojson"

	fencegatev1 "github.com/fencegate/fencegate/api/gen/fencegate/v1"
	"github.com/fencegate/fencegate/api/internal/jsonbody"
)

var codec = jsonbody.Codec{JSONPb: &runtime.JSONPb{MarshalOptions: protojson.MarshalOptions{EmitUnpopulated: true}}}

func exec(params string) string {
	return `{"statements":[{"sql":"INSERT INTO t VALUES ($1)","params":[` + params + `]}]}`
}

func TestCheckNumbers(t *testing.T) {
	tests := []struct {
		name, body string
		wantPath   string // "" for no error
		wantNumber string
		outOfRange bool
	}{
		{name: "small integer", body: exec("7")},
		{name: "largest exact", body: exec("9007199254740991")},
		{name: "smallest exact", body: exec("-9007199254740991")},
		{name: "15 digits", body: exec("999999999999999")},
		{name: "minus zero", body: exec("-0")},
		{name: "fraction", body: exec("1.5")},
		{name: "small exponent", body: exec("1e15")},
		{name: "tiny", body: exec("1e-300")},
		{name: "as a string", body: exec(`"12345678901234567"`)},
		{name: "in the SQL", body: `{"statements":[{"sql":"SELECT 12345678901234567"}]}`},
		{name: "after an escaped quote", body: exec(`"a\"12345678901234567"`)},
		{name: "after an escaped backslash", body: exec(`"a\\", 1`)},

		{name: "beyond 2^53", body: exec("12345678901234567"), wantPath: "statements[0].params[0]", wantNumber: "12345678901234567"},
		{name: "2^53", body: exec("9007199254740992"), wantPath: "statements[0].params[0]", wantNumber: "9007199254740992"},
		{name: "2^53+1", body: exec("9007199254740993"), wantPath: "statements[0].params[0]", wantNumber: "9007199254740993"},
		{name: "negative", body: exec(`"x", -9007199254740992`), wantPath: "statements[0].params[1]", wantNumber: "-9007199254740992"},
		{name: "2^64", body: exec("18446744073709551616"), wantPath: "statements[0].params[0]", wantNumber: "18446744073709551616"},
		{name: "with a fraction", body: exec("12345678901234567.0"), wantPath: "statements[0].params[0]", wantNumber: "12345678901234567.0"},
		{name: "with an exponent", body: exec("1.2345678901234567e16"), wantPath: "statements[0].params[0]", wantNumber: "1.2345678901234567e16"},
		{name: "rounds up to 2^53", body: exec("9007199254740991.9"), wantPath: "statements[0].params[0]", wantNumber: "9007199254740991.9"},
		{name: "out of range", body: exec("1e400"), wantPath: "statements[0].params[0]", wantNumber: "1e400", outOfRange: true},
		{name: "negative out of range", body: exec("-1e400"), wantPath: "statements[0].params[0]", wantNumber: "-1e400", outOfRange: true},
		{
			name: "second statement", body: `{"statements":[{"sql":"a","params":[1]},{"sql":"b","params":["x",{"k":[1,12345678901234567]}]}]}`,
			wantPath: "statements[1].params[1].k[1]", wantNumber: "12345678901234567",
		},
		{
			name: "redis argument", body: `{"commands":[["SET","{f}:k","1"],["SET","{f}:k",12345678901234567]]}`,
			wantPath: "commands[1][2]", wantNumber: "12345678901234567",
		},
		{name: "top level", body: `12345678901234567`, wantNumber: "12345678901234567"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := jsonbody.CheckNumbers([]byte(tt.body))
			if tt.wantNumber == "" {
				if err != nil {
					t.Fatalf("got %v, want no error", err)
				}
				return
			}
			var ne *jsonbody.NumberError
			if !errors.As(err, &ne) {
				t.Fatalf("got %v, want a *NumberError", err)
			}
			if ne.Path != tt.wantPath || ne.Number != tt.wantNumber || ne.OutOfRange != tt.outOfRange {
				t.Errorf("got path %q number %q out of range %v, want %q %q %v", ne.Path, ne.Number, ne.OutOfRange, tt.wantPath, tt.wantNumber, tt.outOfRange)
			}
			if strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), tt.wantNumber) {
				t.Errorf("got message %q, want one line naming %s", err, tt.wantNumber)
			}
		})
	}
}

func TestDecode(t *testing.T) {
	var req fencegatev1.ExecRequest
	if err := codec.Decode([]byte(exec(`9007199254740991, "12345678901234567", -0, 0.25`)), &req); err != nil {
		t.Fatalf("got %v, want no error", err)
	}
	ps := req.Statements[0].Params
	if got := ps[0].GetNumberValue(); got != 9007199254740991 {
		t.Errorf("param 0: got %v, want 9007199254740991", got)
	}
	if got := ps[1].GetStringValue(); got != "12345678901234567" {
		t.Errorf("param 1: got %q, want the string as sent", got)
	}
	if got := ps[2].GetNumberValue(); got != 0 {
		t.Errorf("param 2: got %v, want 0", got)
	}
	if got := ps[3].GetNumberValue(); got != 0.25 {
		t.Errorf("param 3: got %v, want 0.25", got)
	}

	for _, body := range []string{exec("12345678901234567"), exec("1e400")} {
		req.Reset()
		var ne *jsonbody.NumberError
		if err := codec.Decode([]byte(body), &req); !errors.As(err, &ne) {
			t.Errorf("Decode(%s): got %v, want a *NumberError", body, err)
		}
	}
	if err := codec.Decode([]byte(" \n"), &req); !errors.Is(err, io.EOF) {
		t.Errorf("empty body: got %v, want io.EOF", err)
	}
	if err := codec.Decode([]byte(exec("1")+` {}`), &req); err == nil {
		t.Errorf("text after the body: got no error, want one")
	}
}
