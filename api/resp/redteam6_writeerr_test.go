package resp_test

import (
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/resp"
)

// smallBufListener gives each accepted connection a small send buffer, so
// that a client that does not read makes the server's writes block.
type smallBufListener struct{ net.Listener }

func (l smallBufListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4096)
	}
	return c, err
}

// TestRedTeam6WriteErrorKeepsRunning: once writing a reply has failed
// (WriteTimeout: the client stopped reading), the session's bufio.Writer
// holds the error, but serve goes on reading the commands the client had
// already pipelined and running them in Redis batch after batch, their
// replies thrown into the failed writer; only when the read buffer is empty
// does flush report the error and end the session. Every one of those
// writes is applied with no reply ever sent: the connection was known to
// be dead before they ran.
func TestRedTeam6WriteErrorKeepsRunning(t *testing.T) {
	const wt = 300 * time.Millisecond
	e := newEnv(t, resp.Config{WriteTimeout: wt})
	f := unique("rt6we")
	tok, _ := e.lead(t, f)
	F := func(s string) string { return "{" + f + "}:" + s }
	if err := e.admin.Set(t.Context(), F("big"), strings.Repeat("b", 900<<10), 0).Err(); err != nil {
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
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	r := &raw{t: t, c: conn, br: newBufReader(conn)}
	r.send(cmd("AUTH", f, strconv.FormatUint(tok, 10)))
	r.want("+OK")

	// One pipeline, well inside the session's 16 KiB read buffer: a large
	// read the client will not take in time, then 100 increments.
	const n = 100
	var b strings.Builder
	b.WriteString(cmd("GET", F("big")))
	for range n {
		b.WriteString(cmd("INCR", F("n")))
	}
	r.send(b.String())
	// The client does not read: the server's write of GET's reply blocks
	// and times out after wt.
	time.Sleep(3 * wt)
	// Now read: what the server had written, then the end of the
	// connection, which the session closes once it stops.
	_, _ = io.Copy(io.Discard, conn)
	stored := e.stored(t, F("n"))
	got, _ := strconv.Atoi(stored)
	// The first batch (MaxPipelineBatch 16: GET and 15 INCRs) ran before
	// its replies were written; nothing after the failed write should.
	if got > 15 {
		t.Errorf("after the reply write timed out: %d of the %d pipelined INCRs were applied in Redis, want at most the 15 of the batch whose replies failed", got, n)
	}
}
