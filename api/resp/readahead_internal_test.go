package resp

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// readAll starts a readAhead over in and waits until it has read all of
// it, so that what buffered sees does not depend on timing.
func readAll(t *testing.T, in io.Reader, limit int) *readAhead {
	t.Helper()
	a := newReadAhead(in, limit)
	t.Cleanup(a.stop)
	pump(a, true)
	defer pump(a, false)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		a.mu.Lock()
		done := a.err != nil
		a.mu.Unlock()
		if done {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatal("readAhead did not read its input")
		}
	}
}

// pump has a read ahead as while a write waits (on), starting its
// goroutine, or stop doing so after its read in progress (off).
func pump(a *readAhead, on bool) {
	a.writing.Store(on)
	if on {
		a.takeOver()
	}
}

// TestBufferedSkipsEmptyCommands: after a command, what follows counts as
// more input only once a command has begun; the empty commands Redis
// skips are consumed, so a command followed by one is answered at once.
func TestBufferedSkipsEmptyCommands(t *testing.T) {
	lim := limits{maxArgs: 16, maxBulk: 1 << 10, maxCommand: 1 << 12, maxInline: 1 << 10}
	for _, tt := range []struct {
		after string
		want  bool
	}{
		{"", false},
		{"\r\n", false},
		{"\n", false},
		{" \t\r\n\r\n", false},
		{"*0\r\n", false},
		{"*-1\r\n*-7\r\n*0\n", false},
		{"\r\n*0\r\n", false},
		{"*0\r", false},  // not yet a command
		{"PI", false},    // not yet a whole line
		{"*1\r\n", true}, // begun: the rest is on its way
		{"*1\r\n$4\r\nPI", true},
		{"\r\n*0\r\nPING\r\n", true},
		{"*-0\r\n", true}, // a protocol error, to be reported
		{"*x\r\n", true},
		{strings.Repeat("x", 20<<10), true}, // longer than the buffer
	} {
		in := "*1\r\n$4\r\nPING\r\n" + tt.after
		r := newReader(readAll(t, strings.NewReader(in), 1<<20), lim)
		if args, err := r.command(); err != nil || len(args) != 1 || args[0] != "PING" {
			t.Fatalf("%q: got %q, %v; want PING", in, args, err)
		}
		if got := r.buffered(); got != tt.want {
			t.Errorf("PING then %.40q: buffered() = %v, want %v", tt.after, got, tt.want)
		}
	}
}

// TestReaderNegativeMultibulk: a negative multibulk count is an empty
// command to Redis (string2ll), skipped; -0 and a bare sign are not
// numbers.
func TestReaderNegativeMultibulk(t *testing.T) {
	lim := limits{maxArgs: 16, maxBulk: 1 << 10, maxCommand: 1 << 12, maxInline: 1 << 10}
	r := newReader(strings.NewReader("*-5\r\n*-1\r\n*1\r\n$4\r\nPING\r\n*-0\r\n"), lim)
	if args, err := r.command(); err != nil || len(args) != 1 || args[0] != "PING" {
		t.Fatalf("got %q, %v; want PING", args, err)
	}
	var pe *protocolError
	if _, err := r.command(); !errors.As(err, &pe) {
		t.Errorf("*-0: got %v, want a protocol error", err)
	}
	r = newReader(strings.NewReader("*1\r\n$-3\r\n"), lim)
	if _, err := r.command(); !errors.As(err, &pe) || !strings.Contains(err.Error(), "invalid bulk length") {
		t.Errorf("$-3: got %v, want invalid bulk length", err)
	}
}

// endless is a client that never stops sending.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}

// TestReadAheadBounded: reading stops at the limit (give or take one
// read), and goes on as the session takes what was read; a burst's
// buffer is let go once taken.
func TestReadAheadBounded(t *testing.T) {
	const limit = 1 << 20
	a := newReadAhead(endless{}, limit)
	pump(a, true)
	held := func() int {
		for deadline := time.Now().Add(5 * time.Second); !a.atLimit(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("reading did not stop at the limit")
			}
		}
		return a.waiting()
	}
	if n := held(); n < limit || n > limit+aheadSize {
		t.Errorf("holds %d bytes, want %d to %d", n, limit, limit+aheadSize)
	}
	p := make([]byte, 256<<10)
	for range 2 * limit / len(p) {
		if _, err := io.ReadFull(a, p); err != nil {
			t.Fatal(err)
		}
	}
	if n := held(); n < limit || n > limit+aheadSize {
		t.Errorf("after taking %d bytes: holds %d, want %d to %d", 2*limit, n, limit, limit+aheadSize)
	}
	a.setLimit(1)
	if _, err := io.ReadFull(a, make([]byte, a.waiting())); err != nil {
		t.Fatal(err)
	}
	held()
	a.mu.Lock()
	kept := cap(a.buf) + cap(a.chunk)
	a.mu.Unlock()
	if kept > 3*aheadSize {
		t.Errorf("after a burst was taken: %d bytes of buffers kept, want at most %d", kept, 3*aheadSize)
	}
	a.stop() // endless never blocks: stop alone ends it
}
