package pgwire_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/fencegate/fencegate/api/pgwire"
)

// TestCheckPortalNameTaken: a client that holds the unnamed portal gets
// the check on a portal of fencegate's name (fencegate_check); one that
// bound a portal of that name first, in the same transaction, makes the
// check's Bind fail, and so its transaction: nothing of it runs or is
// stored, and its next transaction is fenced as any other.
func TestCheckPortalNameTaken(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	e.table(t, "portal_taken")
	tok, _ := e.lead(t, "portal-taken")
	z := e.raw(t, "portal-taken", tok)
	z.send(
		&pgproto3.Parse{Query: "SET TRANSACTION READ WRITE"},
		&pgproto3.Bind{}, // the unnamed portal, put before the check
		&pgproto3.Bind{DestinationPortal: "fencegate_check"}, // fencegate's portal name, taken
		// The check goes in front.
		&pgproto3.Parse{Name: "pt_ins", Query: "INSERT INTO portal_taken (v) SELECT 'taken:' || " + fencedMark},
		&pgproto3.Bind{DestinationPortal: "p", PreparedStatement: "pt_ins"},
		&pgproto3.Execute{},
		&pgproto3.Execute{Portal: "p"},
		&pgproto3.Sync{},
	)
	errs, st, err := z.results(1)
	if err != nil {
		t.Fatal(err)
	}
	if len(errs) == 0 || st != 'I' {
		t.Fatalf("errors %q, status %c; want the transaction failed", errs, st)
	}
	if got := e.values(t, "portal_taken"); len(got) != 0 {
		t.Fatalf("rows %q, want none", got)
	}
	errs, _ = z.query("INSERT INTO portal_taken (v) SELECT 'next:' || " + fencedMark)
	if got := e.values(t, "portal_taken"); len(errs) != 0 || len(got) != 1 || got[0] != "next:portal-taken" {
		t.Fatalf("the next transaction: errors %q, rows %q; want one fenced row", errs, got)
	}
}
