package resp

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func TestReader(t *testing.T) {
	lim := limits{maxArgs: 4, maxBulk: 8, maxCommand: 12, maxInline: 16}
	tests := []struct {
		in      string
		want    [][]string
		wantErr string
	}{
		{"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", [][]string{{"GET", "k"}}, ""},
		{"*0\r\n*-1\r\n*1\r\n$4\r\nPING\r\n", [][]string{{"PING"}}, ""},
		{"\r\nPING  x\tY\r\nECHO a\n", [][]string{{"PING", "x", "Y"}, {"ECHO", "a"}}, ""},
		{"*1\r\n$0\r\n\r\n", [][]string{{""}}, ""},
		{"*5\r\n", nil, "multibulk length over the limit of 4"},
		{"*1\r\n$9\r\n", nil, "bulk length over the limit of 8"},
		{"*2\r\n$8\r\n12345678\r\n$8\r\n12345678\r\n", nil, "command of more than 12 bytes"},
		{"*1\r\n$-1\r\n", nil, "invalid bulk length"},
		{"*1\r\n:1\r\n", nil, "expected '$'"},
		{"*1\r\n$2\r\nabc\r\n", nil, "bulk string not followed by CRLF"},
		{"*a\r\n", nil, "invalid multibulk length"},
		{"SET k \"a b\"\r\n", nil, "quotes in inline commands"},
		{"SET k " + strings.Repeat("v", 20) + "\r\n", nil, "too big inline request"},
		{"*1\r\n$3\r\nGE", nil, io.ErrUnexpectedEOF.Error()},
	}
	for _, tt := range tests {
		r := newReader(strings.NewReader(tt.in), lim)
		var got [][]string
		var err error
		for {
			var args []string
			if args, err = r.command(); err != nil {
				break
			}
			got = append(got, args)
		}
		if tt.wantErr == "" {
			if !errors.Is(err, io.EOF) {
				t.Errorf("%q: got error %v, want EOF after the commands", tt.in, err)
			}
		} else if !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%q: got error %v, want %q", tt.in, err, tt.wantErr)
		}
		if len(got) != len(tt.want) {
			t.Errorf("%q: got %q, want %q", tt.in, got, tt.want)
			continue
		}
		for i := range got {
			if strings.Join(got[i], "|") != strings.Join(tt.want[i], "|") {
				t.Errorf("%q: command %d: got %q, want %q", tt.in, i, got[i], tt.want[i])
			}
		}
	}
}

// FuzzReader: any input parses into commands within the limits or ends
// in an error; it never panics.
func FuzzReader(f *testing.F) {
	for _, s := range []string{"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", "PING\r\n", "*1\r\n$-1\r\n", "*9999999999\r\n", "$3\r\nabc\r\n"} {
		f.Add(s)
	}
	lim := limits{maxArgs: 8, maxBulk: 64, maxCommand: 128, maxInline: 64}
	f.Fuzz(func(t *testing.T, in string) {
		r := newReader(strings.NewReader(in), lim)
		for range 1000 {
			args, err := r.command()
			if err != nil {
				return
			}
			n := 0
			for _, a := range args {
				n += len(a)
				if len(a) > lim.maxBulk && len(a) > lim.maxInline {
					t.Fatalf("argument of %d bytes passed the limits", len(a))
				}
			}
			if len(args) == 0 || len(args) > lim.maxArgs || n > max(lim.maxCommand, lim.maxInline) {
				t.Fatalf("command %q passed the limits", args)
			}
		}
	})
}
