package pgwire_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/fencegate/fencegate/api/pgwire"
)

// TestRedTeam7SkippedQueryCheckLeaksAdmission: a simple Query sent in an
// extended-protocol segment before any Bind or Execute gets the fence
// check as a prefix (query: needCheck), admitted with AdmitSQL, which
// counts the write as in flight until its Admission is Done. When an
// earlier message of the segment failed on the server (here a Parse of
// BEGIN, which fencegate sends on with no check in front, under a name
// the session holds already: 42P05), the server
// skips everything up to the Sync, that Query included, and S2C's front
// drops the Query's queue entry with it. front gives only ownCheck
// entries' admissions to notRun; the Query's entry is the client's
// (ownClient) and carries the admission of its prefix, which is dropped
// without Done. Each such segment leaks one in-flight write for good:
// after MaxInFlight (2048 by default) of them, every PostgreSQL write of
// the whole gateway, any client's, any fence's, through every front, is
// refused OVERLOADED.
func TestRedTeam7SkippedQueryCheckLeaksAdmission(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	e.table(t, "rt7leak")
	tok, _ := e.lead(t, "rt7leak")
	z := e.raw(t, "rt7leak", tok)

	z.send(&pgproto3.Parse{Name: "rt7_taken", Query: "BEGIN"}, &pgproto3.Sync{})
	if errs, _, err := z.results(1); err != nil || len(errs) != 0 {
		t.Fatalf("Parse: errors %q, %v", errs, err)
	}

	const rounds = 2048 // proxy.DefaultConfig().MaxInFlight
	var batch []pgproto3.FrontendMessage
	for range rounds {
		batch = append(batch,
			&pgproto3.Parse{Name: "rt7_taken", Query: "BEGIN"},
			&pgproto3.Query{String: "SELECT 1"},
			&pgproto3.Sync{})
	}
	z.send(batch...)
	errs, st, err := z.results(rounds)
	if err != nil || len(errs) != rounds || st != 'I' {
		t.Fatalf("%d segments: %d errors (first %q), status %q, %v; want one 42P05 each", rounds, len(errs), errs[:min(1, len(errs))], st, err)
	}

	// Another client, another session: an ordinary write.
	c := e.connect(t, "rt7leak", tok)
	if _, err := c.Exec(t.Context(), "INSERT INTO rt7leak (v) VALUES ('after')"); err != nil {
		t.Fatalf("another client's write after %d segments whose Query the server skipped: %v\n"+
			"want it stored: the skipped Queries' fence checks were admitted and never Done, so they count as writes in flight for good", rounds, err)
	}
}
