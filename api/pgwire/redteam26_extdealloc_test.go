package pgwire_test

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/pgwire"
)

// rt26ExtMsg appends one extended-protocol message of type typ with body
// parts (each written as given) to b.
func rt26ExtMsg(b []byte, typ byte, parts ...[]byte) []byte {
	start := len(b)
	b = append(b, typ, 0, 0, 0, 0)
	for _, p := range parts {
		b = append(b, p...)
	}
	binary.BigEndian.PutUint32(b[start+1:], uint32(len(b)-start-1))
	return b
}

// rt26CStr is s followed by NUL.
func rt26CStr(s string) []byte { return append([]byte(s), 0) }

// rt26ExtExec appends Parse (unnamed) of sql, Bind, Describe, Execute and
// Sync, as libpq's PQsendQueryParams with no parameters sends them.
func rt26ExtExec(b []byte, sql string) []byte {
	b = rt26ExtMsg(b, 'P', rt26CStr(""), rt26CStr(sql), []byte{0, 0})
	b = rt26ExtMsg(b, 'B', rt26CStr(""), rt26CStr(""), []byte{0, 0, 0, 0, 0, 0})
	b = rt26ExtMsg(b, 'D', []byte{'P', 0})
	b = rt26ExtMsg(b, 'E', rt26CStr(""), []byte{0, 0, 0, 0})
	return rt26ExtMsg(b, 'S')
}

// TestRedTeam26ExtendedDeallocateKept:
//
// Attack: a client prepares statements with the protocol's Parse under
// ever new names and drops each with SQL DEALLOCATE sent in the extended
// protocol (Parse of "DEALLOCATE name" as the unnamed statement, Bind,
// Describe, Execute, Sync). This is what psycopg 3 does in pipeline mode:
// its prepared-statement cache (prepared_max = 100) evicts the oldest
// with `DEALLOCATE _pg3_<n>`, and after a ROLLBACK or a DROP sends
// `DEALLOCATE ALL`, both through _exec_command, which in pipeline mode
// always uses PQsendQueryParams (the extended protocol). The database
// then holds no prepared statement of the session's.
//
// What happened (on this code): 09f2bc4 made fencegate forget the
// statements SQL DEALLOCATE (ALL) and DISCARD ALL drop only when they come
// in a simple Query (session.reply records verdict.deallocates for a 'Q'
// reply alone). The same statement run by Execute drops the server's
// statement and nothing of fencegate's: session.stmts keeps the name and
// its verdict, with the whole text (a copy of its own when over the verdict
// cache's 64 KiB), for as long as the session lives. Here 160 statements
// of 512 KiB, each deallocated at once, leave about 80 MiB of the
// listener's heap held by one session that holds no statement at all in
// the database: red-team 25's TestRedTeam25DeallocatedStatementsKept, by
// the other protocol.
//
// What should happen: a DEALLOCATE (ALL) that the server ran by Execute
// drops the names from fencegate's view too, exactly as the Query path
// does. Careful: it must be applied in order with the segment's other
// changes (a Parse of the same name pipelined after the Execute, before
// the Sync, makes the name again, and must not be forgotten, or a COMMIT
// parsed there would be taken for a query made by SQL PREPARE).
//
// Severity: medium (availability): one long-lived session of an ordinary
// application (psycopg 3 in pipeline mode with more than 100 distinct
// statements) grows the shared gateway's memory without bound, until it is
// OOM-killed with every fence's sessions.
func TestRedTeam26ExtendedDeallocateKept(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	tok, _ := e.lead(t, "rt26extdealloc")
	conn := e.hijack(t, "rt26extdealloc", tok)
	_ = conn.SetDeadline(time.Now().Add(90 * time.Second))
	r := bufio.NewReaderSize(conn, 4096)

	const (
		rounds = 160
		size   = 512 << 10
	)
	filler := strings.Repeat("p", size)
	buf := make([]byte, 0, size+256)
	before := rt25xHeap()
	for i := range rounds {
		name := fmt.Sprintf("_pg3_%d", i)
		b := rt26ExtMsg(buf[:0], 'P', rt26CStr(name), rt26CStr(fmt.Sprintf("SELECT length('%06d%s')", i, filler)), []byte{0, 0})
		b = rt26ExtMsg(b, 'S')
		buf = b[:0]
		if _, err := conn.Write(b); err != nil {
			t.Fatal(err)
		}
		if got, msg := rt25xTypes(rt25xUntilZ(t, r)); got != "1Z" {
			t.Fatalf("Parse %s: got %q (%s), want ParseComplete, ReadyForQuery", name, got, msg)
		}
		if _, err := conn.Write(rt26ExtExec(nil, "DEALLOCATE "+name)); err != nil {
			t.Fatal(err)
		}
		// ParseComplete, BindComplete, NoData, CommandComplete, ReadyForQuery.
		if got, msg := rt25xTypes(rt25xUntilZ(t, r)); got != "12nCZ" {
			t.Fatalf("DEALLOCATE %s by Execute: got %q (%s)", name, got, msg)
		}
	}
	// The client's statements, not the check fencegate prepares under a name
	// of its own while the client holds the unnamed one.
	msgs := rt25xQuery(t, conn, r, "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE '_pg3_%'")
	if got, msg := rt25xTypes(msgs); got != "TDCZ" {
		t.Fatalf("count: got %q (%s)", got, msg)
	}
	if row := msgs[1].body; string(row[6:]) != "0" {
		t.Fatalf("the database holds %q prepared statements of the session, want 0", row[6:])
	}
	filler, buf = "", nil
	held := rt25xHeap() - before
	const bound = 16 << 20
	if held > bound {
		t.Fatalf("after %d statements of %d KiB were prepared and each deallocated with SQL DEALLOCATE run by the extended "+
			"protocol's Execute (psycopg 3's pipeline mode; the database holds none), the listener's heap grew by %d MiB "+
			"for this one session (bound %d MiB): fencegate forgets what DEALLOCATE drops only when it comes in a simple Query",
			rounds, size>>10, held>>20, bound>>20)
	}
}
