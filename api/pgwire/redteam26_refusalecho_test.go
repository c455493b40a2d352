package pgwire_test

import (
	"bufio"
	"encoding/binary"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/pgwire"
)

// TestRedTeam26RefusedTextPinsSession:
//
// Attack: a zombie (its token below the fence's current term: nothing of
// it is ever admitted) opens a few connections and sends on each, once,
// one simple Query that pg_query cannot parse because a quoted string
// never ends: SELECT '<16 MiB>. Then it leaves the connections idle.
//
// What happened (on this code): classify refuses the text with "cannot
// parse the SQL (<pg_query's message>)", and pg_query's message for an
// unterminated string is `unterminated quoted string at or near "<the
// whole rest of the text>"`: the refusal carries the client's 16 MiB.
// query answers it itself (the session is idle) with c.cerr, which
// writes the ErrorResponse into session.out (refusalError(c.out[:0], r))
// and keeps it: 0f12d39's keepBuf guards the rewritten Query and
// failSegment, not cerr (nor S2C's serr, which a refusal inside a block
// goes through, nor reparse and check, which reuse session.out). Every
// later refusal of the zombie reuses that buffer, so nothing shrinks it.
// Here 6 idle sessions hold about 96 MiB; MaxConnections (10000)
// sessions of a client that no fence admits hold up to 10000 x
// MaxMessage (256 MiB). The client is also sent its whole text back,
// and the refusal's log line ("write refused", err=...) holds it whole.
//
// What should happen: what fencegate keeps per session is bounded by a
// small size whatever it refused: a refusal's message quotes at most a
// bounded part of the client's text (cut pg_query's message, as
// clipText cuts the server's), and a buffer grown past keepBuf's bound
// for one message is let go, in cerr and serr too.
//
// Severity: medium (availability): a fenced-out writer, with nothing
// admitted, pins memory without bound in time on the shared gateway
// until it is OOM-killed with every fence's sessions.
func TestRedTeam26RefusedTextPinsSession(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	old, resign := e.lead(t, "rt26echo")
	resign()
	if cur, _ := e.lead(t, "rt26echo"); cur <= old {
		t.Fatalf("new term %d not above %d", cur, old)
	}
	const (
		sessions = 6
		size     = 16 << 20
	)
	// One buffer for every Query, so that the test holds none of them.
	body := "SELECT '0" + strings.Repeat("q", size)
	msg := make([]byte, 5, 5+len(body)+1)
	msg[0] = 'Q'
	binary.BigEndian.PutUint32(msg[1:], uint32(4+len(body)+1))
	msg = append(append(msg, body...), 0)
	body = ""
	var conns []net.Conn
	for i := range sessions {
		conn := e.hijack(t, "rt26echo", old)
		_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
		msg[5+len("SELECT '")] = byte('0' + i) // distinct texts
		if _, err := conn.Write(msg); err != nil {
			t.Fatal(err)
		}
		got, why := rt25xTypes(rt25xUntilZ(t, bufio.NewReaderSize(conn, 4096)))
		if got != "EZ" || !strings.Contains(why, "INVALID_REQUEST") {
			t.Fatalf("session %d: got %q (%.200s), want the refusal and ReadyForQuery", i, got, why)
		}
		if i == 0 {
			t.Logf("the refusal's message is %d bytes long", len(why))
		}
		conns = append(conns, conn)
	}
	msg = nil
	idle := rt25xHeap()
	for _, c := range conns {
		_ = c.Close()
	}
	time.Sleep(300 * time.Millisecond) // the sessions end
	held := idle - rt25xHeap()
	const bound = 8 << 20
	if held > bound {
		t.Fatalf("%d idle sessions of a zombie (token %d, below the current term), each of which sent one refused, "+
			"unparsable Query of %d MiB, hold %d MiB of the listener's heap until they close (bound %d MiB): the refusal quotes the whole "+
			"text, and session.out keeps the ErrorResponse written into it (cerr has no keepBuf)",
			sessions, old, size>>20, held>>20, bound>>20)
	}
}
