package listen

import (
	"errors"
	"net"
	"testing"
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
