package pgwire_test

import (
	"bufio"
	"encoding/binary"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/pgwire"
)

// TestRedTeam25SessionKeepsLargestQuery:
//
// Attack: a client allowed to write (the fence's leader) runs, once, on
// each of a handful of pooled connections, one large simple Query (a bulk
// INSERT ... VALUES of tens of megabytes, or here SELECT length('<16
// MiB>')), then leaves the connections idle in its pool, as pools do for
// hours.
//
// What happened (on this code): C2S rewrites every Query that starts a
// transaction into session.out (the fence check, then the client's SQL:
// client.go, query) and keeps that buffer, grown to the largest Query the
// session ever sent, for the session's whole life: nothing shrinks it
// (msgReader drops its own large buffer after each message, "a one-off:
// do not keep it"; session.out and S2C's session.sout have no such
// rule). Here 6 idle sessions keep about 96 MiB between them, freed only
// when they close; MaxConnections (10000) sessions keep up to 10000 x
// MaxMessage (256 MiB). An ordinary application with a pool of 50
// connections that sends one 100 MiB batch on each holds 5 GiB of
// fencegate's memory for as long as its pool lives.
//
// What should happen: a buffer grown past a small size for one message is
// let go after it (as msgReader does), so an idle session holds a few
// tens of kilobytes whatever it sent before.
//
// Severity: medium (availability): memory held without bound by
// idle sessions, from ordinary large statements; with the verdict cache
// (TestRedTeam25VerdictCacheHoldsWholeTexts) the gateway is OOM-killed.
func TestRedTeam25SessionKeepsLargestQuery(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	tok, _ := e.lead(t, "rt25out")
	const (
		sessions = 6
		size     = 16 << 20
	)
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	// The client's side speaks the protocol by hand from one buffer, so
	// that nothing of its own holds the queries.
	body := "SELECT length('0" + strings.Repeat("q", size) + "')"
	msg := make([]byte, 5, 5+len(body)+1)
	msg[0] = 'Q'
	binary.BigEndian.PutUint32(msg[1:], uint32(4+len(body)+1))
	msg = append(append(msg, body...), 0)
	body = ""
	var conns []net.Conn
	for i := range sessions {
		conn := e.hijack(t, "rt25out", tok)
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		msg[5+len("SELECT length('")] = byte('0' + i) // distinct texts
		if _, err := conn.Write(msg); err != nil {
			t.Fatal(err)
		}
		// RowDescription, DataRow, CommandComplete, ReadyForQuery.
		if got := readMessages(t, bufio.NewReaderSize(conn, 512), 4); string(got) != "TDCZ" {
			t.Fatalf("session %d: got %q, want TDCZ", i, got)
		}
		conns = append(conns, conn)
	}
	msg = nil
	idle := heap()
	for _, c := range conns {
		_ = c.Close()
	}
	time.Sleep(300 * time.Millisecond) // the sessions end
	closed := heap()
	held := int64(idle) - int64(closed)
	const bound = 8 << 20
	if held > bound {
		t.Fatalf("%d idle sessions, each of which had run one query of %d MiB, held %d MiB of the listener's heap "+
			"until they closed (bound %d MiB): each session keeps the buffer of its largest rewritten Query",
			sessions, size>>20, held>>20, bound>>20)
	}
}
