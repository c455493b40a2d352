package pgwire_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/fencegate/fencegate/api/pgwire"
)

// rt21Long returns a prepared statement or portal name of 63 'n's (the
// longest name PostgreSQL keeps, NAMEDATALEN - 1) followed by suffix.
// PostgreSQL keys its prepared statements (prepare.c) and portals
// (portalmem.c) in hash tables whose keys are NAMEDATALEN bytes: two
// names that agree in their first 63 bytes are the same statement, or
// portal, to the server; fencegate's maps (session.stmts, portals) key
// them by the whole name.
func rt21Long(suffix string) string { return strings.Repeat("n", 63) + suffix }

// TestRedTeam21LongStatementNameHidesCommit: the listener decides whether
// an Execute ends the transaction (so that what follows before the Sync
// gets the fence check again, needCheck) from the statement the Bind
// names, looked up by its whole name. PostgreSQL compares prepared
// statement names by their first 63 bytes only. The client parses
// "SELECT 1" as <63 n's>1, closes <63 n's>2 (to the server: the same
// statement, which it drops), parses "COMMIT" as <63 n's>2 (to the server:
// <63 n's>1 again), then binds and executes <63 n's>1: fencegate takes it
// for the SELECT, the server runs COMMIT, ending the fenced transaction,
// and the INSERT pipelined after it runs in a new transaction with no
// fence check in front.
//
// What happened: the INSERT's row lands with fencegate.fenced unset
// (UNFENCED): it committed in a transaction that never ran the fence
// check (and held no lock on the fence's row, so a zombie's pipeline can
// write after the next leader).
//
// What should happen: every transaction is fenced: the COMMIT is seen as
// one (names compared as PostgreSQL compares them, or names over 63
// bytes refused), and the INSERT gets the check in front, or is refused.
//
// Severity: high — a write outside any fenced transaction, with nothing
// but a valid token at the time of the first check.
func TestRedTeam21LongStatementNameHidesCommit(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	e.table(t, "rt21_stmt")
	tok, _ := e.lead(t, "rt21-stmt")
	z := e.raw(t, "rt21-stmt", tok)
	one, two := rt21Long("1"), rt21Long("2")
	z.send(&pgproto3.Parse{Name: one, Query: "SELECT 1"}, &pgproto3.Sync{})
	errs, _, err := z.results(1)
	if err != nil || len(errs) > 0 {
		t.Fatalf("parse: %q %v", errs, err)
	}
	z.send(
		&pgproto3.Close{ObjectType: 'S', Name: two},
		&pgproto3.Parse{Name: two, Query: "COMMIT"},
		&pgproto3.Sync{},
	)
	errs, _, err = z.results(1)
	if err != nil || len(errs) > 0 {
		t.Fatalf("close and parse: %q %v", errs, err)
	}
	z.send(msgs(
		&pgproto3.Bind{PreparedStatement: one},
		&pgproto3.Execute{},
		ext("INSERT INTO rt21_stmt (v) SELECT 'after:' || "+fencedMark),
		&pgproto3.Sync{},
	)...)
	errs, _, err = z.results(1)
	t.Logf("pipeline: errors %q, %v; rows %q", errs, err, e.values(t, "rt21_stmt"))
	e.noRows(t, "rt21_stmt")
}

// TestRedTeam21LongPortalNameHidesCommit: the same with portals, which
// PostgreSQL also tells apart by their first 63 bytes. In one segment the
// client binds portal <63 n's>1 to "SELECT 1", closes portal <63 n's>2
// (the server drops <63 n's>1), binds <63 n's>2 to "COMMIT" (the server:
// <63 n's>1 again), and executes <63 n's>1: fencegate takes it for the
// SELECT's portal, the server commits, and the INSERT after it runs in a
// new transaction without the check.
//
// What happened: the INSERT's row lands UNFENCED.
//
// What should happen: the COMMIT is seen as one, and the INSERT fenced or
// refused.
//
// Severity: high, as TestRedTeam21LongStatementNameHidesCommit.
func TestRedTeam21LongPortalNameHidesCommit(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	e.table(t, "rt21_portal")
	tok, _ := e.lead(t, "rt21-portal")
	z := e.raw(t, "rt21-portal", tok)
	one, two := rt21Long("1"), rt21Long("2")
	z.send(
		&pgproto3.Parse{Name: "rt21_sel", Query: "SELECT 1"},
		&pgproto3.Parse{Name: "rt21_commit", Query: "COMMIT"},
		&pgproto3.Sync{},
	)
	errs, _, err := z.results(1)
	if err != nil || len(errs) > 0 {
		t.Fatalf("parse: %q %v", errs, err)
	}
	z.send(msgs(
		&pgproto3.Bind{DestinationPortal: one, PreparedStatement: "rt21_sel"},
		&pgproto3.Close{ObjectType: 'P', Name: two},
		&pgproto3.Bind{DestinationPortal: two, PreparedStatement: "rt21_commit"},
		&pgproto3.Execute{Portal: one},
		ext("INSERT INTO rt21_portal (v) SELECT 'after:' || "+fencedMark),
		&pgproto3.Sync{},
	)...)
	errs, _, err = z.results(1)
	t.Logf("pipeline: errors %q, %v; rows %q", errs, err, e.values(t, "rt21_portal"))
	e.noRows(t, "rt21_portal")
}
