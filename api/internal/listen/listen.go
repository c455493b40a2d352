// Package listen holds the accept loop the wire-protocol listeners
// (api/pgwire, api/resp) share.
package listen

import (
	"errors"
	"io"
	"net"
	"time"
)

// ErrClosing is Accept's answer once the server is shutting down.
var ErrClosing = errors.New("listen: server closing")

// Acceptor accepts connections, backing off on temporary errors (too many
// open files) as net/http does: 5 ms, doubling up to a second, reset by
// the next connection.
type Acceptor struct {
	delay time.Duration
}

// Accept returns the next connection on lis. When Accept fails and closing
// reports the server is shutting down (it closed lis), it returns
// ErrClosing; any other error but a temporary one is returned as is.
func (a *Acceptor) Accept(lis net.Listener, closing func() bool) (net.Conn, error) {
	for {
		c, err := lis.Accept()
		if err == nil {
			a.delay = 0
			return c, nil
		}
		if closing() {
			return nil, ErrClosing
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			return nil, err
		}
		a.delay = min(max(2*a.delay, 5*time.Millisecond), time.Second)
		time.Sleep(a.delay)
	}
}

// LingerTime bounds Linger.
const LingerTime = 5 * time.Second

// Linger is a listener's last step before it closes conn after an error
// it has written (a message over its limits): it ends the writing side,
// then reads and drops from r, conn's reader, up to limit bytes (limit < 0:
// until the client closes) for d at most, as a web server lingers before
// it closes. A client still writing what was refused would otherwise have
// the connection reset under it, and lose the error before it reads it.
// Only a logged-in client is worth the time.
func Linger(conn net.Conn, r io.Reader, limit int64, d time.Duration) {
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = conn.SetReadDeadline(time.Now().Add(d))
	if limit < 0 {
		_, _ = io.Copy(io.Discard, r)
		return
	}
	_, _ = io.CopyN(io.Discard, r, limit)
}
