package pgwire_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/fencegate/fencegate/api/pgwire"
)

// TestRedTeam4ReplacedSetupStatement: 486fc0c re-parses fencegate's own
// check for each transaction because dynamic SQL can deallocate and
// prepare statements of any name. The same holds for the client's own
// statements, which fencegate classifies once, at their Parse: one parsed
// as SET TRANSACTION (kindSetup, first) is bound and executed without the
// check in front (the deferral for statements that set a transaction
// up). DEALLOCATE and PREPARE (plain SQL, or dynamic SQL in a DO block),
// in a fenced transaction, replace it with a statement of the same name
// that writes, or that calls advance_session; the next transaction's Bind
// and Execute of that name ran it first, unfenced (found by a review on
// 2026-11-28). fencegate now prepares such a statement again, with the
// text it classified, in front of its Bind (session.reparse).
func TestRedTeam4ReplacedSetupStatement(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	const fence = "rt4-setup"
	t.Cleanup(func() { // forget a poisoned mark
		_, _ = e.admin.Exec(context.WithoutCancel(ctx), "SELECT fencegate.reset($1, 0)", fence)
	})
	e.table(t, "rt4_setup")
	tok, _ := e.lead(t, fence)
	z := e.raw(t, fence, tok)

	run := func(replace string) ([]string, byte) {
		t.Helper()
		// The statement as fencegate sees it made: SET TRANSACTION.
		z.send(&pgproto3.Parse{Name: "rt4_s1", Query: "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE"}, &pgproto3.Sync{})
		if errs, _, err := z.results(1); err != nil || len(errs) > 0 {
			t.Fatalf("parse: %v %q", err, errs)
		}
		// Replaced by dynamic SQL, in a transaction fencegate fenced.
		if errs, _ := z.query(replace); len(errs) > 0 {
			t.Fatalf("replace: %q", errs)
		}
		// A new transaction: Bind and Execute of the name.
		z.send(&pgproto3.Bind{PreparedStatement: "rt4_s1"}, &pgproto3.Execute{}, &pgproto3.Sync{})
		errs, st, err := z.results(1)
		if err != nil {
			t.Fatal(err)
		}
		z.send(&pgproto3.Close{ObjectType: 'S', Name: "rt4_s1"}, &pgproto3.Sync{})
		if _, _, err := z.results(1); err != nil {
			t.Fatal(err)
		}
		return errs, st
	}

	// Plain SQL, no dynamic SQL needed: DEALLOCATE, then PREPARE.
	errs, _ := run("DEALLOCATE rt4_s1; PREPARE rt4_s1 AS INSERT INTO rt4_setup (v) SELECT 'plain:' || " + fencedMark)
	got := e.values(t, "rt4_setup")
	t.Logf("write (plain SQL): errors %q, rows %q", errs, got)
	errs, _ = run("DO $$ BEGIN EXECUTE 'DEALLOC' || 'ATE rt4_s1'; EXECUTE $q$PREP$q$ || $q$ARE rt4_s1 AS INSERT INTO rt4_setup (v) SELECT 'do:' || " + fencedMark + "$q$; END $$")
	got = e.values(t, "rt4_setup")
	t.Logf("write (DO): errors %q, rows %q", errs, got)
	for _, v := range got {
		if strings.HasSuffix(v, "UNFENCED") {
			t.Errorf("HOLE: row %q written without the fence check", v)
		}
	}

	const maxInt64 = "9223372036854775807"
	errs, _ = run("DO $$ BEGIN EXECUTE 'DEALLOC' || 'ATE rt4_s1'; EXECUTE $q$PREP$q$ || $q$ARE rt4_s1 AS SELECT fence$q$ || $q$gate.advance_session('" + fence + "', " + maxInt64 + ")$q$; END $$")
	mark := markOf(t, e, fence)
	t.Logf("advance_session: errors %q, mark %d (token %d)", errs, mark, tok)
	if mark != tok {
		t.Errorf("HOLE: the client moved fence %s's mark from %d to %d", fence, tok, mark)
	}
}
