package resp_test

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/resp"
)

// TestRedTeam21TrailingEmptyLineWithholdsReply: a client sends a complete
// command followed by an empty command ("INCR k\r\n\r\n": telnet and nc
// users pressing Enter twice, scripts that end every command with an
// extra CRLF; or "*0\r\n", which Redis ignores) and waits for the reply.
// Redis skips the empty command and answers at once. fencegate's session
// sees input still buffered after the command (reader.buffered), so it
// neither flushes nor stops batching: reader.command skips the empty
// command and then blocks reading the next one from the socket. A PING's
// reply sits unflushed; a data command is not even run. The client waits
// for ever (here 2 s, then it gives up). Worse, when the client then gives
// up and closes the connection, the pending batch does run (serve runs
// the batch read so far before handling the read error, EOF): the INCR is
// applied after the client was left with a timeout, so a client that
// retries it on a new connection, as libraries do after a timeout,
// increments twice. Expected: as Redis, a command is answered as soon as
// nothing complete is left to read, and never applied once its client
// has gone without an answer. Severity: medium (hang of an ordinary
// client; applied write with no acknowledgement, duplicated on retry).
func TestRedTeam21TrailingEmptyLineWithholdsReply(t *testing.T) {
	e := newEnv(t, resp.Config{})
	f := unique("rt21empty")
	tok, _ := e.lead(t, f)
	for _, tc := range []struct{ name, trail string }{
		{"empty inline line", "\r\n"},
		{"empty array", "*0\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Redis itself answers at once.
			plain := unique("rt21emptyplain")
			if got := rt21FirstLine(t, redisServer.Addr(), cmd("INCR", plain)+tc.trail); got != ":1" {
				t.Fatalf("Redis itself answered %q, want :1", got)
			}

			r := authRaw(t, e, f, tok)
			r.send(cmd("PING") + tc.trail)
			if l, err := rt21ReadLine(r, 2*time.Second); err != nil {
				t.Errorf("PING followed by %q: no reply within 2 s (%v); Redis answers at once", tc.trail, err)
			} else if l != "+PONG" {
				t.Errorf("PING: got %q", l)
			}

			key := "{" + f + "}:" + unique("n")
			r = authRaw(t, e, f, tok)
			r.send(cmd("INCR", key) + tc.trail)
			l, err := rt21ReadLine(r, 2*time.Second)
			if err == nil {
				if l != ":1" {
					t.Errorf("INCR: got %q, want :1", l)
				}
				return
			}
			t.Errorf("INCR followed by %q: no reply within 2 s (%v); Redis answers at once", tc.trail, err)
			// The client gives up, closes, and retries on a new
			// connection, as a library does after a read timeout.
			r.c.Close()
			r2 := authRaw(t, e, f, tok)
			r2.send(cmd("INCR", key))
			got := r2.reply()
			time.Sleep(200 * time.Millisecond)
			if v := e.stored(t, key); v != "1" {
				t.Errorf("after the client closed the unanswered connection and retried the INCR once: retry answered %q, Redis holds %q; the unanswered INCR was applied after its client gave up", got, v)
			}
		})
	}
}

func rt21ReadLine(r *raw, d time.Duration) (string, error) {
	_ = r.c.SetReadDeadline(time.Now().Add(d))
	defer r.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	l, err := r.br.ReadString('\n')
	return strings.TrimRight(l, "\r\n"), err
}

// rt21FirstLine sends payload to addr and returns the first reply line.
func rt21FirstLine(t *testing.T, addr, payload string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write([]byte(payload)); err != nil {
		t.Fatal(err)
	}
	l, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("Redis itself: %v", err)
	}
	return strings.TrimRight(l, "\r\n")
}
