package listen

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// conn is a tracked connection that records how it was closed.
type conn struct {
	idle   bool
	closes atomic.Int32
	c      net.Conn
}

func (c *conn) CloseIfIdle() {
	if c.idle {
		c.CloseNow()
	}
}

func (c *conn) CloseNow() { c.closes.Add(1); c.c.Close() }

// TestGroup: the limit admit enforces is counted, Shutdown closes the idle
// connections at once and waits for the busy one, then closes it when its
// context ends; Serve returns ErrClosing.
func TestGroup(t *testing.T) {
	var g Group[*conn]
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tracked := make(chan *conn, 4)
	served := make(chan error, 1)
	go func() {
		served <- g.Serve(lis,
			func(open int64) bool { return open <= 2 },
			func(c net.Conn) { c.Close() },
			func(c net.Conn, open int64) {
				tc := &conn{c: c, idle: open == 1}
				if !g.Track(tc, true) {
					c.Close()
					return
				}
				defer g.Track(tc, false)
				tracked <- tc
				_, _ = c.Read(make([]byte, 1)) // until closed
			})
	}()
	var clients []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	idle, busy := <-tracked, <-tracked
	if !idle.idle {
		idle, busy = busy, idle
	}
	// The third was refused: its read ends.
	_ = clients[2].SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := clients[2].Read(make([]byte, 1)); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("third connection: read got %v, want it closed", err)
	}
	if open, refused := g.Connections(); open != 2 || refused != 1 {
		t.Fatalf("Connections: got %d open, %d refused; want 2, 1", open, refused)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if err := g.Shutdown(ctx, g.Close); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: got %v, want the context's deadline (the busy one never ends by itself)", err)
	}
	if idle.closes.Load() == 0 || busy.closes.Load() == 0 {
		t.Errorf("closes: idle %d, busy %d; want both closed", idle.closes.Load(), busy.closes.Load())
	}
	if err := <-served; !errors.Is(err, ErrClosing) {
		t.Errorf("Serve: got %v, want ErrClosing", err)
	}
	if !g.Closing() || g.Track(&conn{}, true) {
		t.Error("after Shutdown: want Closing and Track refusing")
	}
	if open, _ := g.Connections(); open != 0 {
		t.Errorf("open after Shutdown: got %d, want 0", open)
	}
}
