package resp_test

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/resp"
)

// TestRedTeam11InlineUnicodeSpaces: an inline command is split on white
// space. Redis splits on the ASCII white space bytes only (sdssplitargs,
// isspace in the C locale); reader.inline uses bytes.Fields, which decodes
// UTF-8 and also splits on U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028,
// U+2029, U+202F, U+205F and U+3000. The same bytes therefore name other
// arguments through fencegate than through Redis: RPUSH of one value
// holding a no-break space pushes two elements, DEL of one key deletes
// two others, SET k "a<NBSP>b" becomes a syntax error. A drop-in client
// (nc, telnet, scripts writing inline commands) gets different data
// written than Redis would write for the same command.
func TestRedTeam11InlineUnicodeSpaces(t *testing.T) {
	e := newEnv(t, resp.Config{})
	f := unique("rt11inl")
	tok, _ := e.lead(t, f)
	ctx := t.Context()
	for _, sp := range []struct{ name, s string }{
		{"U+00A0 no-break space", "\u00a0"},
		{"U+3000 ideographic space", "\u3000"},
		{"U+2028 line separator", "\u2028"},
	} {
		t.Run(sp.name, func(t *testing.T) {
			// Redis itself, same inline bytes: one element.
			plain := unique("rt11inlplain")
			if got := inlineTo(t, redisServer.Addr(), "RPUSH "+plain+" a"+sp.s+"b\r\n"); got != ":1" {
				t.Fatalf("Redis itself answered %q, want :1 (one element)", got)
			}
			if n, _ := e.admin.LLen(ctx, plain).Result(); n != 1 {
				t.Fatalf("Redis itself: LLEN %d, want 1", n)
			}

			key := "{" + f + "}:" + unique("l")
			r := authRaw(t, e, f, tok)
			r.send("RPUSH " + key + " a" + sp.s + "b\r\n")
			got := r.reply()
			elems, _ := e.admin.LRange(ctx, key, 0, -1).Result()
			if got != ":1" || len(elems) != 1 || elems[0] != "a"+sp.s+"b" {
				t.Errorf("inline RPUSH of one value holding %s: fencegate answered %q and the list holds %q; Redis answers :1 and holds one element %q", sp.name, got, elems, "a"+sp.s+"b")
			}
		})
	}
}

// inlineTo sends one inline command to a plain Redis at addr and returns
// its reply's first line.
func inlineTo(t *testing.T, addr, line string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, line); err != nil {
		t.Fatal(err)
	}
	l, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimRight(l, "\r\n")
}
