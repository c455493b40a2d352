package pgwire_test

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/pgwire"
)

// rt25xMsg is one backend message read by hand.
type rt25xMsg struct {
	typ  byte
	body []byte
}

// rt25xUntilZ reads messages up to and including a ReadyForQuery.
func rt25xUntilZ(t *testing.T, r *bufio.Reader) []rt25xMsg {
	t.Helper()
	var msgs []rt25xMsg
	var hdr [5]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			t.Fatalf("after %d messages: %v", len(msgs), err)
		}
		body := make([]byte, int(binary.BigEndian.Uint32(hdr[1:]))-4)
		if _, err := io.ReadFull(r, body); err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, rt25xMsg{hdr[0], body})
		if hdr[0] == 'Z' {
			return msgs
		}
	}
}

// rt25xTypes is the messages' types, and the first error's message.
func rt25xTypes(msgs []rt25xMsg) (string, string) {
	var b strings.Builder
	errMsg := ""
	for _, m := range msgs {
		b.WriteByte(m.typ)
		if m.typ == 'E' && errMsg == "" {
			for f := m.body; len(f) > 1 && f[0] != 0; {
				i := strings.IndexByte(string(f[1:]), 0)
				if i < 0 {
					break
				}
				if f[0] == 'M' {
					errMsg = string(f[1 : 1+i])
				}
				f = f[2+i:]
			}
		}
	}
	return b.String(), errMsg
}

// rt25xQuery sends a simple Query and reads its answers.
func rt25xQuery(t *testing.T, conn net.Conn, r *bufio.Reader, sql string) []rt25xMsg {
	t.Helper()
	msg := make([]byte, 5, 6+len(sql))
	msg[0] = 'Q'
	binary.BigEndian.PutUint32(msg[1:], uint32(4+len(sql)+1))
	msg = append(append(msg, sql...), 0)
	if _, err := conn.Write(msg); err != nil {
		t.Fatal(err)
	}
	return rt25xUntilZ(t, r)
}

// rt25xHeap is the live heap after a full collection.
func rt25xHeap() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// TestRedTeam25DeallocatedStatementsKept:
//
// Attack: a client (the fence's leader, or any ordinary application: Rails'
// statement pool names its statements a1, a2, ... and, past its
// statement_limit, drops the oldest with SQL `DEALLOCATE a<n>`; pools run
// DEALLOCATE ALL or DISCARD ALL on every check-in) prepares statements with
// the protocol's Parse under ever new names and drops each with SQL
// DEALLOCATE, as a simple Query. The database then holds no prepared
// statement at all.
//
// What happened (on this code): fencegate records every Parse the server
// confirms in session.stmts (name -> verdict, and the verdict holds the
// statement's whole text: for a text over the verdict cache's 64 KiB a copy
// of its own) and forgets one only on a protocol Close of that name
// (startSegment). SQL DEALLOCATE name, DEALLOCATE ALL and DISCARD ALL (the
// listener even rewrites DISCARD ALL into DEALLOCATE ALL itself) change the
// server's set of statements and nothing of fencegate's: its map, and the
// texts, grow with every name the session ever used while the server's
// stays empty. Here 160 statements of 512 KiB, each deallocated at once,
// leave about 80 MiB of the listener's heap held by one session that holds
// no statement at all in the database; the growth has no bound but the
// session's life (MaxMessage, 256 MiB, per name).
//
// What should happen: what the session keeps of prepared statements is
// bounded by what the server holds: SQL DEALLOCATE name / DEALLOCATE ALL
// (and DISCARD ALL) drop the names from fencegate's view as a protocol
// Close does, or a statement's text is not kept beyond what classifying
// later messages needs.
//
// Severity: medium (availability): one long-lived session of an ordinary
// application (or a leader on purpose) grows the shared gateway's memory
// without bound, until it is OOM-killed with every fence's sessions.
func TestRedTeam25DeallocatedStatementsKept(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	tok, _ := e.lead(t, "rt25dealloc")
	conn := e.hijack(t, "rt25dealloc", tok)
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
	r := bufio.NewReaderSize(conn, 4096)

	const (
		rounds = 160
		size   = 512 << 10
	)
	// One buffer for every Parse, so that the test keeps none of them.
	filler := strings.Repeat("p", size)
	parse := make([]byte, 0, size+256)
	build := func(i int) []byte {
		name := fmt.Sprintf("a%d", i)
		sql := fmt.Sprintf("SELECT length('%06d%s')", i, filler)
		b := append(parse[:0], 'P', 0, 0, 0, 0)
		b = append(append(b, name...), 0)
		b = append(append(b, sql...), 0)
		b = append(b, 0, 0) // no parameter types
		binary.BigEndian.PutUint32(b[1:], uint32(len(b)-1))
		b = append(b, 'S', 0, 0, 0, 4)
		parse = b[:0]
		return b
	}
	before := rt25xHeap()
	for i := range rounds {
		if _, err := conn.Write(build(i)); err != nil {
			t.Fatal(err)
		}
		if got, msg := rt25xTypes(rt25xUntilZ(t, r)); got != "1Z" {
			t.Fatalf("Parse a%d: got %q (%s), want ParseComplete, ReadyForQuery", i, got, msg)
		}
		if got, msg := rt25xTypes(rt25xQuery(t, conn, r, fmt.Sprintf("DEALLOCATE a%d", i))); got != "CZ" {
			t.Fatalf("DEALLOCATE a%d: got %q (%s)", i, got, msg)
		}
	}
	// The database holds no prepared statement of the session's.
	msgs := rt25xQuery(t, conn, r, "SELECT count(*) FROM pg_prepared_statements")
	if got, msg := rt25xTypes(msgs); got != "TDCZ" {
		t.Fatalf("count: got %q (%s)", got, msg)
	}
	if row := msgs[1].body; string(row[6:]) != "0" {
		t.Fatalf("the database holds %q prepared statements of the session, want 0", row[6:])
	}
	filler = ""
	parse = nil
	held := rt25xHeap() - before
	const bound = 16 << 20
	if held > bound {
		t.Fatalf("after %d statements of %d KiB were prepared and each deallocated with SQL DEALLOCATE (the database holds none), "+
			"the listener's heap grew by %d MiB for this one session (bound %d MiB): fencegate keeps every statement name, "+
			"and its text, that SQL deallocated", rounds, size>>10, held>>20, bound>>20)
	}
}
