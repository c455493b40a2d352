package pgwire_test

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/pgwire"
)

// TestRedTeam26ReparseKeepsBuffer:
//
// Attack: a zombie (its token below the fence's current term) prepares,
// with the protocol's Parse, a statement that sets a transaction up and
// carries a large comment, SET TRANSACTION ISOLATION LEVEL REPEATABLE
// READ /* <16 MiB> */, runs it once with Bind and Execute, closes it, and
// leaves the connection idle. All of it runs before any fence check
// (a statement that sets the transaction up is exempt, pendingCheck), so
// no token is judged; the database keeps nothing once it is closed.
//
// What happened (on this code): a Bind of a named statement that sets a
// transaction up is preceded by reparse, which writes Close and Parse of
// the statement's whole text (verdict.text) into session.out and keeps
// it there (c.out = b; no keepBuf), and check, which later reuses
// session.out, keeps it too (c.out = b). 0f12d39 let go of a buffer grown
// past 64 KiB in query and failSegment only: here 6 idle sessions, whose
// statements are closed in the database and in fencegate's view, still
// hold about 96 MiB, the size of the text each reparsed once; with
// MaxMessage (256 MiB), 256 MiB per connection, for as long as it lives.
//
// What should happen: reparse (and check, cerr, serr) keep the buffer only
// if it stayed small (keepBuf), so an idle session holds a few tens of
// kilobytes whatever it sent before.
//
// Severity: medium (availability): a client whose token is refused
// (nothing of it is admitted) pins memory without bound in time, per
// connection, on the shared gateway.
func TestRedTeam26ReparseKeepsBuffer(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	old, resign := e.lead(t, "rt26reparse")
	resign()
	if cur, _ := e.lead(t, "rt26reparse"); cur <= old {
		t.Fatalf("new term %d not above %d", cur, old)
	}
	const (
		sessions = 6
		size     = 16 << 20
	)
	sql := "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ /* 0" + strings.Repeat("r", size) + " */"
	parse := rt26ExtMsg(nil, 'P', rt26CStr("big"), rt26CStr(sql), []byte{0, 0})
	parse = rt26ExtMsg(parse, 'S')
	sql = ""
	at := 5 + len("big") + 1 + len("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ /* ")
	run := rt26ExtMsg(nil, 'B', rt26CStr(""), rt26CStr("big"), []byte{0, 0, 0, 0, 0, 0})
	run = rt26ExtMsg(run, 'E', rt26CStr(""), []byte{0, 0, 0, 0})
	run = rt26ExtMsg(run, 'S')
	closeMsg := rt26ExtMsg(nil, 'C', []byte{'S'}, rt26CStr("big"))
	closeMsg = rt26ExtMsg(closeMsg, 'S')
	var conns []net.Conn
	for i := range sessions {
		conn := e.hijack(t, "rt26reparse", old)
		_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
		r := bufio.NewReaderSize(conn, 4096)
		parse[at] = byte('0' + i) // distinct texts
		for _, step := range []struct {
			what string
			msgs []byte
			want string
		}{
			{"Parse", parse, "1Z"},
			{"Bind, Execute", run, "2NCZ"}, // N: a WARNING, no block
			{"Close", closeMsg, "3Z"},
		} {
			if _, err := conn.Write(step.msgs); err != nil {
				t.Fatal(err)
			}
			if got, why := rt25xTypes(rt25xUntilZ(t, r)); got != step.want {
				t.Fatalf("session %d, %s: got %q (%.200s), want %q", i, step.what, got, why, step.want)
			}
		}
		// The database holds nothing of the session's: the statement is closed.
		msgs := rt25xQuery(t, conn, r, "SELECT 1")
		if got, _ := rt25xTypes(msgs); got != "EZ" {
			t.Fatalf("session %d: a zombie's query got %q, want its refusal", i, got)
		}
		conns = append(conns, conn)
	}
	parse = nil
	idle := rt25xHeap()
	for _, c := range conns {
		_ = c.Close()
	}
	time.Sleep(300 * time.Millisecond) // the sessions end
	held := idle - rt25xHeap()
	const bound = 8 << 20
	if held > bound {
		t.Fatalf("%d idle sessions of a zombie (token %d), each of which ran and closed one statement of %d MiB that sets "+
			"a transaction up, hold %d MiB of the listener's heap until they close (bound %d MiB): reparse's buffer "+
			"(session.out) is kept whatever its size",
			sessions, old, size>>20, held>>20, bound>>20)
	}
}
