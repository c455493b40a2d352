package listen

import (
	"bufio"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

type tempErr struct{}

func (tempErr) Error() string   { return "too many open files" }
func (tempErr) Timeout() bool   { return true }
func (tempErr) Temporary() bool { return true }

// script is a listener whose Accept answers errs in turn, then a conn.
type script struct {
	net.Listener
	errs []error
}

func (l *script) Accept() (net.Conn, error) {
	if len(l.errs) > 0 {
		err := l.errs[0]
		l.errs = l.errs[1:]
		return nil, err
	}
	c, _ := net.Pipe()
	return c, nil
}

func TestAccept(t *testing.T) {
	var a Acceptor
	l := &script{errs: []error{tempErr{}, tempErr{}}}
	c, err := a.Accept(l, func() bool { return false })
	if err != nil || c == nil {
		t.Fatalf("after temporary errors: got %v, %v, want a connection", c, err)
	}
	c.Close()
	if a.delay != 0 {
		t.Fatalf("delay %v after a connection, want it reset", a.delay)
	}
	closed := errors.New("use of closed network connection")
	if _, err := a.Accept(&script{errs: []error{closed}}, func() bool { return true }); !errors.Is(err, ErrClosing) {
		t.Fatalf("closing: got %v, want ErrClosing", err)
	}
	if _, err := a.Accept(&script{errs: []error{closed}}, func() bool { return false }); !errors.Is(err, closed) {
		t.Fatalf("not closing: got %v, want the listener's error", err)
	}
}

// TestLinger: Linger ends the writing side (the client reads EOF after the
// error), reads at most max bytes and stops when the client closes or
// after d, whichever comes first.
func TestLinger(t *testing.T) {
	pair := func(t *testing.T) (server, client net.Conn) {
		t.Helper()
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer lis.Close()
		client, err = net.Dial("tcp", lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		server, err = lis.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { server.Close(); client.Close() })
		return server, client
	}
	t.Run("max bytes", func(t *testing.T) {
		server, client := pair(t)
		if _, err := client.Write([]byte("refused-message|next")); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(server)
		Linger(server, r, int64(len("refused-message|")), 5*time.Second)
		if rest, _ := io.ReadAll(io.LimitReader(r, 4)); string(rest) != "next" {
			t.Errorf("read past max: %q left, want \"next\"", rest)
		}
		_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := client.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
			t.Errorf("the client read %d bytes, %v, want EOF: the writing side was not ended", n, err)
		}
	})
	t.Run("until the client closes", func(t *testing.T) {
		server, client := pair(t)
		go func() {
			_, _ = client.Write(make([]byte, 1<<20))
			client.Close()
		}()
		start := time.Now()
		Linger(server, server, -1, 5*time.Second)
		if waited := time.Since(start); waited > 2*time.Second {
			t.Errorf("lingered %v after the client closed", waited)
		}
	})
	t.Run("a client that never stops", func(t *testing.T) {
		server, client := pair(t)
		go func() {
			buf := make([]byte, 64<<10)
			for {
				if _, err := client.Write(buf); err != nil {
					return
				}
			}
		}()
		const d = 200 * time.Millisecond
		start := time.Now()
		Linger(server, server, -1, d)
		if waited := time.Since(start); waited < d || waited > d+2*time.Second {
			t.Errorf("lingered %v, want about %v", waited, d)
		}
	})
}
