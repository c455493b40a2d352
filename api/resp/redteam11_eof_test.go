package resp_test

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/resp"
)

// TestRedTeam11RepliesLostAtEndOfStream: a client that sends complete
// commands followed by the start of one more and then ends its side of
// the stream (shutdown(SHUT_WR): `printf 'SET k v\nGET k' | nc`, a script
// piping a file without a trailing newline, a client that dies mid-write)
// has its complete commands run, as Redis runs them; Redis also answers
// them before closing. fencegate applies them but closes the connection
// without writing their replies: fail() flushes the buffered replies only
// for io.EOF, while the reader turns an end of stream inside a command
// into io.ErrUnexpectedEOF. The writes are applied and never acknowledged.
func TestRedTeam11RepliesLostAtEndOfStream(t *testing.T) {
	e := newEnv(t, resp.Config{})
	f := unique("rt11eof")
	tok, _ := e.lead(t, f)
	F := func(s string) string { return "{" + f + "}:" + s }
	for _, tt := range []struct {
		name    string
		payload func(key string) string
	}{
		{"multibulk", func(k string) string { return cmd("SET", k, "1") + "*2\r\n$3\r\nGET" }},
		{"inline", func(k string) string { return "SET " + k + " 1\r\nGET " + k }},
		{"local then partial", func(k string) string { return "PING\r\n" + cmd("SET", k, "1") + "*1\r\n" }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// Redis itself, same bytes: it answers the complete commands.
			if got := sendAndHalfClose(t, redisServer.Addr(), tt.payload(unique("rt11plain"))); !strings.Contains(got, "+OK") {
				t.Fatalf("Redis itself answered %q, want +OK (the test's premise)", got)
			}
			r := authRaw(t, e, f, tok)
			key := F(unique("k"))
			r.send(tt.payload(key))
			if err := r.c.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			_ = r.c.SetReadDeadline(time.Now().Add(10 * time.Second))
			got, _ := io.ReadAll(r.br)
			stored := e.stored(t, key)
			if stored != "1" {
				t.Fatalf("stored %q: the complete SET did not run", stored)
			}
			if !strings.Contains(string(got), "+OK") {
				t.Errorf("SET was applied (stored %q) but the client read %q before the connection closed, want its +OK (Redis answers complete commands before closing)", stored, got)
			}
		})
	}
}

// sendAndHalfClose sends payload to a plain Redis at addr, ends the
// stream and returns everything read until the server closes.
func sendAndHalfClose(t *testing.T, addr, payload string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, payload); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(c)
	return string(got)
}
