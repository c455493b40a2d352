package pgwire_test

import (
	"bufio"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/pgwire"
)

// rt25xSetups sends the most statements that set up one transaction that
// fencegate runs before its check (maxDeferrals, 16), each with a comment
// of size bytes, and returns the heap they left held.
func rt25xSetups(t *testing.T, e *env, fence string, token uint64, size int, end func(q func(string) string)) (inBlock, after int64) {
	t.Helper()
	conn := e.hijack(t, fence, token)
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
	r := bufio.NewReaderSize(conn, 4096)
	q := func(sql string) string {
		got, msg := rt25xTypes(rt25xQuery(t, conn, r, sql))
		return got + " " + msg
	}
	before := rt25xHeap()
	filler := strings.Repeat("s", size)
	for i := range 16 {
		stmt := "SET TRANSACTION ISOLATION LEVEL READ COMMITTED"
		if i == 0 {
			stmt = "BEGIN ISOLATION LEVEL READ COMMITTED"
		}
		if got := q(fmt.Sprintf("%s /* %02d %s */", stmt, i, filler)); got != "CZ " {
			t.Fatalf("setup statement %d: got %q, want CommandComplete, ReadyForQuery", i, got)
		}
	}
	filler = ""
	inBlock = rt25xHeap() - before
	end(q)
	after = rt25xHeap() - before
	return inBlock, after
}

// TestRedTeam25SetupTextsOutliveTransaction:
//
// Attack: with an audit log configured (--audit-log), a client opens a
// transaction with BEGIN ISOLATION LEVEL ... and SET TRANSACTION ...
// (ActiveRecord, asyncpg and pgx's BeginTx do; here with a large comment
// each, up to MaxMessage), which fencegate runs before the transaction's
// check (pendingCheck, at most maxDeferrals = 16 of them), then ends it and
// stays connected, idle, as pooled connections do.
//
// What happened (on this code): S2C appends the text of each such
// statement to session.setupTexts, for the audit fingerprint, and when
// the check passes or the transaction ends "empties" it with
// setupTexts[:0], which keeps every string in the slice's backing array:
// the texts stay reachable for as long as the session lives (until as many
// later setup statements overwrite their slots). Here 16 statements of
// 4 MiB leave about 64 MiB held by a session that is idle, its transaction
// over; with MaxMessage (256 MiB) a session pins 4 GiB, and every pooled
// connection its own.
//
// What should happen: nothing of an ended transaction's statements is
// held (clear the slice before reslicing it, as countRows does for its
// savepoints), so an idle session holds a few kilobytes.
//
// Severity: medium (availability): memory held without bound in time by
// idle sessions, from statements an ordinary driver sends.
func TestRedTeam25SetupTextsOutliveTransaction(t *testing.T) {
	var trail auditTrail
	e := newEnvWith(t, pgwire.Config{}, envOptions{audit: &trail})
	tok, _ := e.lead(t, "rt25setup")
	const size = 4 << 20
	_, after := rt25xSetups(t, e, "rt25setup", tok, size, func(q func(string) string) {
		if got := q("ROLLBACK"); got != "CZ " {
			t.Fatalf("ROLLBACK: got %q", got)
		}
	})
	const bound = 16 << 20
	if after > bound {
		t.Fatalf("an idle session whose transaction began with 16 setup statements of %d MiB, and ended, "+
			"holds %d MiB of the listener's heap (bound %d MiB): setupTexts[:0] keeps the texts reachable",
			size>>20, after>>20, bound>>20)
	}
}

// TestRedTeam25ZombieSetupTextsPinned:
//
// Attack: a zombie (its token below the fence's current term: every
// transaction of its is refused) opens a block with BEGIN ISOLATION LEVEL
// ... and 15 SET TRANSACTION ..., each carrying a comment as large as
// MaxMessage allows, and then sends nothing more, holding the block open.
//
// What happened (on this code): those statements run before the fence
// check (pendingCheck), so no token is judged for them at all, and S2C
// keeps each text whole in session.setupTexts until a check passes in that
// transaction, which for a zombie never happens. The block has no open
// admission (session.open is nil until a check passes), so the sweep that
// ends transactions of ended terms never looks at it, and fencegate holds
// the texts for as long as the zombie keeps the connection. Here 16
// statements of 4 MiB hold about 64 MiB; with MaxMessage (256 MiB) one
// zombie connection pins 4 GiB, and it may open as many as
// MaxConnections allows.
//
// What should happen: the fingerprint of the statements that set up a
// transaction is kept in constant memory (a digest, as the transaction's
// own statements are) or only their bounded prefix, so that a client whose
// token is refused cannot make fencegate hold what it sent.
//
// Severity: medium (availability): a fenced-out writer, with no write
// accepted, makes the shared gateway hold gigabytes per connection until
// it is OOM-killed.
func TestRedTeam25ZombieSetupTextsPinned(t *testing.T) {
	var trail auditTrail
	e := newEnvWith(t, pgwire.Config{}, envOptions{audit: &trail})
	old, resign := e.lead(t, "rt25zsetup")
	resign()
	if cur, _ := e.lead(t, "rt25zsetup"); cur <= old {
		t.Fatalf("new term %d not above %d", cur, old)
	}
	const size = 4 << 20
	inBlock, _ := rt25xSetups(t, e, "rt25zsetup", old, size, func(func(string) string) {})
	const bound = 16 << 20
	if inBlock > bound {
		t.Fatalf("a zombie (token %d, below the current term) that opened a block with 16 setup statements of %d MiB "+
			"holds %d MiB of the listener's heap while it keeps the block open (bound %d MiB)",
			old, size>>20, inBlock>>20, bound>>20)
	}
}
