package resp_test

import (
	"testing"

	"github.com/fencegate/fencegate/api/resp"
)

// TestRedTeam25SetGetNULStatusInjection
//
// Attack: a fence's key holds a value with a line end in it, e.g.
// "x\r\n:777" (any value a worker stored: user input, a predecessor's
// data). A client sends SET key new "GET\x00". Redis reads SET's options
// as C strings (opt[3] == '\0'), so to Redis this is SET ... GET: it
// answers with the replaced value, a bulk string. The listener chooses
// the reply's shape with hasWord(..., "GET") (strings.EqualFold), which
// does not match "GET\x00", so it takes the reply for SET's status (+OK)
// and writes the old value as a status line, "+" value "\r\n", line ends
// and all (writer.status does not escape them; writer.error and
// writer.double do).
//
// What happened (on this code): the client reads "+x", then ":777" as
// the reply to its next command, and every later reply is one off: the
// stored bytes forged a reply in the client's stream.
//
// What should happen: the listener never writes a reply Redis would not
// send; a value is a bulk string (as Redis sends it), or a status line
// that cannot hold CR or LF.
//
// Severity: low (reply injection / stream desync for the client that
// sent the odd argument; the injected bytes come from stored data).
func TestRedTeam25SetGetNULStatusInjection(t *testing.T) {
	e := newEnv(t, resp.Config{})
	f := unique("rt25sg")
	tok, _ := e.lead(t, f)
	k := "{" + f + "}:k"
	r := authRaw(t, e, f, tok)
	stored := "x\r\n:777"
	r.send(cmd("SET", k, stored))
	r.want("+OK")
	r.send(cmd("SET", k, "new", "GET\x00") + cmd("PING"))
	if got := r.reply(); got != "$"+stored {
		t.Errorf("SET k new \"GET\\x00\": got reply %q, want the old value as a bulk string %q, as Redis sends it", got, "$"+stored)
	}
	if got := r.reply(); got != "+PONG" {
		t.Errorf("PING after it: got reply %q, want +PONG (the stream is out of step)", got)
	}
	if got := e.stored(t, k); got != "new" {
		t.Errorf("key holds %q, want new", got)
	}
}
