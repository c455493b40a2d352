package pgwire_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/fencegate/fencegate/api/pgwire"
)

// TestRedTeam7SwallowedQueryStartsSegment: after fencegate refuses a
// message in the middle of an extended-protocol segment (refuseSegment ->
// failSegment), it drops the client's messages up to the Sync (swallow),
// as the server skips its own. A simple Query in that stretch is dropped
// too (the server would ignore it), but query() first sets segStart, so
// the next Query (or FunctionCall) calls startSegment. Nothing of the
// dropped Queries was queued, so waitAnswered does not wait (syncs is 0)
// while the server has not yet answered what came before the refusal:
// startSegment clears c.changes, and S2C, confirming the segment's Parse
// (ParseComplete) a moment later, indexes c.changes[g.chg] of an empty
// slice. The panic is in S2C's goroutine, which nothing recovers: the
// whole fencegate process dies, every session of every client with it.
//
// (Without the panic the loss would be worse: a Parse of COMMIT the server
// holds, forgotten by fencegate, would run through Bind/Execute without
// fencegate setting needCheck, and what follows it in the segment would
// run in a new transaction without the fence check.)
func TestRedTeam7SwallowedQueryStartsSegment(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	tok, _ := e.lead(t, "rt7swallow")
	z := e.raw(t, "rt7swallow", tok)

	z.send(msgs(
		// A statement that keeps the server busy for a second: what
		// comes after it is answered only then.
		ext("SELECT pg_sleep(1)"),
		// A change fencegate records and S2C confirms at ParseComplete.
		&pgproto3.Parse{Name: "rt7_stmt", Query: "COMMIT"},
		// Refused mid-segment (a reserved name): swallow until Sync.
		&pgproto3.Parse{Name: "fencegate_rt7", Query: "SELECT 1"},
		// Dropped, as the server would ignore them; the second one
		// starts a "segment" while the first's messages are unanswered.
		&pgproto3.Query{String: "SELECT 1"},
		&pgproto3.Query{String: "SELECT 2"},
		&pgproto3.Sync{},
	)...)
	errs, st, err := z.results(1)
	t.Logf("errors %q, status %q, err %v", errs, st, err)
	if err != nil || len(errs) != 1 || !strings.HasPrefix(errs[0], "FG006") || st != 'I' {
		t.Fatalf("got errors %q, status %q, err %v; want the reserved name refused (FG006), then ReadyForQuery 'I'", errs, st, err)
	}
	// The session, and fencegate, still serve.
	time.Sleep(200 * time.Millisecond)
	if errs, st := z.query("SELECT 1"); len(errs) != 0 || st != 'I' {
		t.Fatalf("SELECT 1 after the refused segment: errors %q, status %q", errs, st)
	}
	other := e.connect(t, "rt7swallow", tok)
	if _, err := other.Exec(t.Context(), "SELECT 1"); err != nil {
		t.Fatalf("another session after the refused segment: %v", err)
	}
}
