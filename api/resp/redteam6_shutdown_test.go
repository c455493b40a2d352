package resp_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/resp"
)

// trapListener hands out trapConns.
type trapListener struct {
	net.Listener
	onRead func(c *trapConn) // called when a Read returns data holding marker
	marker []byte
}

func (l *trapListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &trapConn{Conn: c, l: l, closed: make(chan struct{})}, nil
}

// trapConn is the server's side of a connection. When a Read has taken
// bytes holding the listener's marker off the socket, it calls onRead
// before returning them: the window between the read system call
// returning a command and the session marking itself busy.
type trapConn struct {
	net.Conn
	l       *trapListener
	once    sync.Once
	tripped bool
	closed  chan struct{}
}

func (c *trapConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.tripped && bytes.Contains(p[:n], c.l.marker) {
		c.tripped = true
		c.l.onRead(c)
	}
	return n, err
}

func (c *trapConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// TestRedTeam6ShutdownClosesAfterRead: Shutdown closes a session it finds
// idle (CloseIfIdle). The session is idle from waitIdle until busy(),
// which runs only after r.command() has returned a command: a command
// read off the socket just before CloseIfIdle still runs, in Redis, on a
// connection already closed. The client gets no reply (EOF: to it, the
// write never happened, and a client library retries it elsewhere) while
// Redis applied it. Shutdown promises the opposite: an idle connection is
// closed without running anything, a busy one is answered first.
func TestRedTeam6ShutdownClosesAfterRead(t *testing.T) {
	e := newEnv(t, resp.Config{})
	f := unique("rt6sd")
	tok, _ := e.lead(t, f)
	key := "{" + f + "}:n"

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	shutdownDone := make(chan error, 1)
	tl := &trapListener{Listener: lis, marker: []byte("INCR")}
	tl.onRead = func(c *trapConn) {
		go func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 10*time.Second)
			defer cancel()
			shutdownDone <- e.srv.Shutdown(ctx)
		}()
		// Shutdown finds the session idle (it is blocked in this Read)
		// and closes it; the bytes already read are then handed over.
		select {
		case <-c.closed:
		case <-time.After(5 * time.Second):
			t.Error("Shutdown did not close the idle session within 5 s")
		}
	}
	served := make(chan error, 1)
	go func() { served <- e.srv.Serve(tl) }()

	conn, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	r := &raw{t: t, c: conn, br: newBufReader(conn)}
	r.send(cmd("AUTH", f, strconv.FormatUint(tok, 10)))
	r.want("+OK")
	r.send(cmd("INCR", key))
	got, rerr := readReply6(r.br)

	if err := <-shutdownDone; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, resp.ErrServerClosed) {
		t.Errorf("Serve: got %v, want ErrServerClosed", err)
	}
	stored := e.stored(t, key)
	switch {
	case rerr == nil && got == ":1" && stored == "1":
		// answered before closing: fine
	case rerr != nil && stored == "":
		// closed without running it: fine
	default:
		t.Errorf("INCR read just before Shutdown closed the idle session: client got (%q, %v), Redis holds %q; want :1 with 1 stored, or no reply with nothing stored",
			got, rerr, stored)
	}
}

func newBufReader(c net.Conn) *bufio.Reader { return bufio.NewReader(c) }
