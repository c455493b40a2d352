package resp

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"strconv"
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

// TestReaderHoldsWhatArrives: a bulk length makes the reader allocate
// about what the client has sent of the bulk, not the length it claimed.
func TestReaderHoldsWhatArrives(t *testing.T) {
	lim := limits{maxArgs: 4, maxBulk: 256 << 20, maxCommand: 256 << 20, maxInline: 16}
	in := "*1\r\n$200000000\r\n" + strings.Repeat("x", 100<<10)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := newReader(strings.NewReader(in), lim).command()
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a bulk cut short: got %v, want %v", err, io.ErrUnexpectedEOF)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 2<<20 {
		t.Errorf("a bulk claiming 200 MB, then 100 KiB, made the reader allocate %d bytes", got)
	}
	// A bulk longer than the read buffer still arrives whole.
	want := strings.Repeat("0123456789", 10<<10)
	args, err := newReader(strings.NewReader("*2\r\n$3\r\nSET\r\n$"+strconv.Itoa(len(want))+"\r\n"+want+"\r\n"), lim).command()
	if err != nil || len(args) != 2 || args[1] != want {
		t.Fatalf("a %d-byte bulk: got %d arguments, %v", len(want), len(args), err)
	}
}

// TestReaderUnauthenticated: before AUTH, Redis's limits for
// unauthenticated clients.
func TestReaderUnauthenticated(t *testing.T) {
	lim := limits{maxArgs: 100, maxBulk: 1 << 20, maxCommand: 8 << 20, maxInline: 16}
	for _, tt := range []struct{ in, wantErr string }{
		{"*11\r\n", "unauthenticated multibulk length"},
		{"*1\r\n$16385\r\n", "unauthenticated bulk length"},
		{"*10\r\n", io.ErrUnexpectedEOF.Error()},
		{"*1\r\n$16384\r\n", io.ErrUnexpectedEOF.Error()},
	} {
		r := newReader(strings.NewReader(tt.in), lim)
		r.unauth = true
		if _, err := r.command(); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%q: got %v, want %q", tt.in, err, tt.wantErr)
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

// BenchmarkReaderSET: the reader's cost per pipelined SET, 1000 to a
// run (go test -run '^$' -bench ReaderSET ./api/resp).
func BenchmarkReaderSET(b *testing.B) {
	in := []byte(strings.Repeat("*3\r\n$3\r\nSET\r\n$12\r\n{bench}:k:42\r\n$1\r\nv\r\n", 1000))
	lim := limits{maxArgs: 4096, maxBulk: 1 << 20, maxCommand: 8 << 20, maxInline: 64 << 10}
	b.ReportAllocs()
	for b.Loop() {
		r := newReader(bytes.NewReader(in), lim)
		for range 1000 {
			if _, err := r.command(); err != nil {
				b.Fatal(err)
			}
		}
	}
}
