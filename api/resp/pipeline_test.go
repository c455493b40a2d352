package resp_test

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/resp"
)

// logBuffer collects a server's log lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestReadAheadBoundClosesNonReader: a client that writes and never reads
// is read up to MaxReadAheadBytes, no further; once it has read nothing
// for WriteTimeout its connection is closed, and logged. Meanwhile the
// listener holds about the bound, not what the client tries to send.
func TestReadAheadBoundClosesNonReader(t *testing.T) {
	const (
		bound = 1 << 20
		wt    = time.Second
		total = 64 << 20 // what the client tries to send
	)
	var logs logBuffer
	e := newEnv(t, resp.Config{MaxReadAheadBytes: bound, WriteTimeout: wt, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	f := unique("rabound")
	tok, _ := e.lead(t, f)
	F := func(s string) string { return "{" + f + "}:" + s }
	if err := e.admin.Set(t.Context(), F("big"), strings.Repeat("b", 256<<10), 0).Err(); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- e.srv.Serve(smallBufListener{lis}) }()
	t.Cleanup(func() { lis.Close(); <-served })

	conn, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	r := &raw{t: t, c: conn, br: newBufReader(conn)}
	r.send(cmd("AUTH", f, strconv.FormatUint(tok, 10)))
	r.want("+OK")

	round := cmd("GET", F("big")) + cmd("SET", F("pad"), strings.Repeat("p", 60<<10)) + cmd("INCR", F("n"))
	before := rt8Heap()
	sent := make(chan int, 1)
	start := time.Now()
	go func() {
		n := 0
		for n < total {
			m, err := io.WriteString(conn, round)
			n += m
			if err != nil {
				break
			}
		}
		sent <- n
	}()
	var n int
	var peak int64
	for done := false; !done; {
		select {
		case n = <-sent:
			done = true
		case <-time.After(50 * time.Millisecond):
			peak = max(peak, rt8Heap()-before)
		}
	}
	took := time.Since(start)
	t.Logf("client sent %d KiB in %v before its writes failed; live heap grew by at most %d KiB", n>>10, took.Round(time.Millisecond), peak>>10)
	if n >= total {
		t.Fatalf("the listener took all %d MiB from a client that reads nothing; want it to stop at about %d MiB", total>>20, bound>>20)
	}
	if took > 15*wt {
		t.Errorf("the connection closed after %v; want about WriteTimeout (%v) after the client stopped reading", took, wt)
	}
	// The bound, a batch of commands being run (a few GETs' 256 KiB
	// replies held as values and as bytes), socket buffers, and noise.
	if limit := int64(16 << 20); peak > limit {
		t.Errorf("live heap grew by %d MiB while the client wrote without reading; want at most %d MiB (MaxReadAheadBytes %d MiB)", peak>>20, limit>>20, bound>>20)
	}
	applied, _ := strconv.Atoi(e.stored(t, F("n")))
	if rounds := n / len(round); applied > rounds {
		t.Errorf("%d INCRs applied of the %d the client sent", applied, rounds)
	}
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(logs.String(), "MaxReadAheadBytes"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no log line about the closed connection; logs: %s", logs.String())
		}
	}
}
