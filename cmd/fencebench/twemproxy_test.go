package main

import (
	"bufio"
	"strings"
	"testing"
)

// TestRespConnReply reads whole replies, nested arrays and bulk strings
// with line ends in them included, and checks them against want.
func TestRespConnReply(t *testing.T) {
	const stream = "*2\r\n:1\r\n+OK\r\n" + // an applied fenced SET
		"*3\r\n$4\r\na\r\nb\r\n$-1\r\n*1\r\n:7\r\n" + // a bulk with CRLF, a nil, a nested array
		"*2\r\n:0\r\n$1\r\n9\r\n" // a stale one
	r := &respConn{br: bufio.NewReader(strings.NewReader(stream))}
	for _, want := range []string{"*2\r\n:1\r\n+OK\r\n", "*3\r\n$4\r\na\r\nb\r\n$-1\r\n*1\r\n:7\r\n", "*2\r\n:0\r\n$1\r\n9\r\n"} {
		got, err := r.reply(nil)
		if err != nil || string(got) != want {
			t.Fatalf("reply: got %q, %v; want %q", got, err, want)
		}
	}
	if _, err := r.reply(nil); err == nil {
		t.Fatal("reply past the end: got nil error")
	}
}
