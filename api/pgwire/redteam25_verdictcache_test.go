package pgwire_test

import (
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/fencegate/fencegate/api/pgwire"
)

// TestRedTeam25VerdictCacheHoldsWholeTexts:
//
// Attack: a zombie (its token is stale, every transaction it starts is
// refused) sends Query messages of distinct SQL texts, each well under
// MaxMessage (256 MiB), here 512 KiB apiece: SELECT of one long string
// literal, different in its first bytes. It never gets anything past the
// fence check; the database sees none of it.
//
// What happened (on this code): the listener classifies every Query and
// Parse text before anything else, through Server.stmts (classify.go,
// verdicts), a cache shared by every session of the server and keyed by
// the whole SQL text, which each cached verdict keeps (verdict.text). The
// cache is bounded by entries only (maxVerdicts, 4096), not by bytes, and
// is cleared only when it has 4096 of them: it holds up to 4095 texts of
// up to MaxMessage each, about 1 TiB. Here 256 texts of 512 KiB stay on
// the heap after the zombie's connection is closed and the GC has run:
// about 128 MiB kept for a client that wrote nothing, and every further
// 512 KiB it sends is kept too, up to 2 GiB at this size, 4095 x 256 MiB
// with the largest messages. One login of any database role, with any
// token of the right form, exhausts fencegate's memory and takes down
// every session of every fence with it. (The SQL Exec path's cache,
// sqlcheck.Config.CacheBytes, is bounded by bytes: 4 MiB by default.)
//
// What should happen: the verdict cache is bounded by the bytes it holds
// (as sqlcheck's is), or does not keep texts over a small size; what a
// client sent is released once answered.
//
// Severity: high (availability): an unauthorised, or zombie, client makes
// the gateway allocate without bound and be OOM-killed, ending every
// fenced session of every fence at once.
func TestRedTeam25VerdictCacheHoldsWholeTexts(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	stale, resign := e.lead(t, "rt25cache")
	resign()
	e.lead(t, "rt25cache")

	const (
		n    = 256
		size = 512 << 10
	)
	pad := strings.Repeat("z", size)
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	func() {
		conn := e.hijack(t, "rt25cache", stale)
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
		fe := pgproto3.NewFrontend(conn, conn)
		for i := range n {
			fe.Send(&pgproto3.Query{String: "SELECT '" + strconv.Itoa(i) + pad + "'"})
			if err := fe.Flush(); err != nil {
				t.Fatal(err)
			}
			refused := false
			for {
				m, err := fe.Receive()
				if err != nil {
					t.Fatalf("query %d: %v", i, err)
				}
				if er, ok := m.(*pgproto3.ErrorResponse); ok && er.Code == "FG001" {
					refused = true
				}
				if _, ok := m.(*pgproto3.ReadyForQuery); ok {
					break
				}
			}
			if !refused {
				t.Fatalf("query %d of the zombie was not refused FG001", i)
			}
		}
	}()
	time.Sleep(200 * time.Millisecond) // the session ends
	after := heap()
	grown := int64(after) - int64(before)
	const bound = 32 << 20
	if grown > bound {
		t.Fatalf("a zombie sent %d distinct queries of %d KiB, every one refused, and left the listener holding %d MiB more heap "+
			"after its connection closed (bound %d MiB): the verdict cache keeps whole SQL texts, bounded by count (4096) and not by bytes",
			n, size>>10, grown>>20, bound>>20)
	}
}
