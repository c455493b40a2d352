package resp_test

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/auth/authtest"
	"github.com/fencegate/fencegate/api/resp"
)

// rt11JamListener hands out connections that can be jammed: once jammed, a
// Write blocks as a socket's does when its send buffer is full (a client
// that stopped reading with replies outstanding, or vanished behind a
// partition with unacknowledged data): until the write deadline, or until
// the connection is closed.
type rt11JamListener struct {
	net.Listener
	mu    sync.Mutex
	conns []*rt11JamConn
}

func (l *rt11JamListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	jc := &rt11JamConn{Conn: c, jammed: make(chan struct{}), closed: make(chan struct{})}
	l.mu.Lock()
	l.conns = append(l.conns, jc)
	l.mu.Unlock()
	return jc, nil
}

func (l *rt11JamListener) jamAll() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		c.jamOnce.Do(func() { close(c.jammed) })
	}
	return len(l.conns)
}

type rt11JamConn struct {
	net.Conn
	jamOnce, closeOnce sync.Once
	jammed, closed     chan struct{}
	mu                 sync.Mutex
	wdl                time.Time
}

func (c *rt11JamConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.wdl = t
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

func (c *rt11JamConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.wdl = t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *rt11JamConn) Write(p []byte) (int, error) {
	select {
	case <-c.jammed:
	default:
		return c.Conn.Write(p)
	}
	c.mu.Lock()
	dl := c.wdl
	c.mu.Unlock()
	var timeout <-chan time.Time
	if !dl.IsZero() {
		tm := time.NewTimer(time.Until(dl))
		defer tm.Stop()
		timeout = tm.C
	}
	select {
	case <-timeout:
		return 0, os.ErrDeadlineExceeded
	case <-c.closed:
		return 0, net.ErrClosed
	}
}

func (c *rt11JamConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// TestRedTeam11TLSShutdownBlocksOnStuckClients: over TLS, Shutdown and
// Close close idle sessions by calling tls.Conn.Close, which first sends
// a close_notify alert with a write deadline of 5 s. To a client whose
// socket takes no more bytes (it stopped reading, or vanished with
// replies unacknowledged) that write blocks the whole 5 s, and it runs
// under the listener group's lock (listen.Group.Shutdown holds g.mu
// while it calls CloseIfIdle on every session; Close the same with
// CloseNow): the sessions are closed one after the other, 5 s each,
// whatever deadline Shutdown's ctx has. Two such clients hold
// Shutdown(ctx with 300 ms) for 10 s. The PostgreSQL listener closes on
// a goroutine of its own for exactly this reason (pgwire
// session.CloseIfIdle).
func TestRedTeam11TLSShutdownBlocksOnStuckClients(t *testing.T) {
	ca := authtest.NewCA(t, "rt11")
	srvCert := ca.Localhost(t, "server")
	e := newEnv(t, resp.Config{TLS: &tls.Config{Certificates: []tls.Certificate{srvCert.TLS}}})
	f := unique("rt11tls")
	tok, _ := e.lead(t, f)

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	jl := &rt11JamListener{Listener: lis}
	served := make(chan error, 1)
	go func() { served <- e.srv.Serve(jl) }()

	const n = 2
	for range n {
		c, err := tls.Dial("tcp", lis.Addr().String(), &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		r := &raw{t: t, c: c, br: newBufReader(c)}
		r.send(cmd("AUTH", f, strconv.FormatUint(tok, 10)))
		r.want("+OK")
		r.send(cmd("PING"))
		r.want("+PONG") // answered and flushed: the session waits for its client
	}
	if got := jl.jamAll(); got != n {
		t.Fatalf("%d connections accepted, want %d", got, n)
	}

	const grace = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), grace)
	defer cancel()
	start := time.Now()
	_ = e.srv.Shutdown(ctx)
	took := time.Since(start)
	<-served
	if took > grace+2*time.Second {
		t.Errorf("Shutdown with a %v deadline took %v with %d idle TLS clients that do not read: closing each idle session blocks on the close_notify write under the listener's lock", grace, took.Round(100*time.Millisecond), n)
	}
}
