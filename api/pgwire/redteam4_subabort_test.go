package pgwire_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/fencegate/fencegate/api/pgwire"
)

// TestRedTeam4SubabortHoldsRow: a block whose error happened inside a
// SAVEPOINT is reported 'E', as a failed transaction is, but only the
// subtransaction aborted: the top level, whose fence check locked the
// fence's row, keeps that lock (found by a review on 2026-11-28, when
// endTransaction left every 'E' block alone on the premise that its locks
// were gone). Its term ending ends it: the next leader writes at once,
// and the zombie's ROLLBACK TO SAVEPOINT, write and COMMIT find its
// connection closed, with FATAL STALE_TOKEN (or TERM_ENDED), and nothing
// of it stored.
func TestRedTeam4SubabortHoldsRow(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	e.table(t, "rt4_subabort")
	old, resign := e.lead(t, "rt4-subabort")
	z := e.raw(t, "rt4-subabort", old)
	if errs, st := z.query("BEGIN; INSERT INTO rt4_subabort (v) VALUES ('zombie')"); len(errs) > 0 || st != 'T' {
		t.Fatalf("begin: %q %c", errs, st)
	}
	if errs, st := z.query("SAVEPOINT s; SELECT 1/0"); len(errs) != 1 || st != 'E' {
		t.Fatalf("savepoint: %q %c", errs, st)
	}
	resign()
	cur, _ := e.lead(t, "rt4-subabort")
	n := e.connect(t, "rt4-subabort", cur)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := n.Exec(wctx, "INSERT INTO rt4_subabort (v) VALUES ('leader')"); err != nil {
		t.Fatalf("the next leader's first write, after %v: %v (the zombie's failed subtransaction kept the fence's row)", time.Since(start).Round(time.Millisecond), err)
	}
	// The zombie, its term over, goes on in the same transaction.
	z.send(&pgproto3.Query{String: "ROLLBACK TO SAVEPOINT s; INSERT INTO rt4_subabort (v) VALUES ('late'); COMMIT"})
	errs, _, err := z.results(1)
	// STALE_TOKEN, or TERM_ENDED when the check ran before the next
	// leader was elected.
	if err == nil || len(errs) != 1 || !strings.HasPrefix(errs[0], "FG001: ") && !strings.HasPrefix(errs[0], "FG002: ") {
		t.Errorf("the zombie after its term: errors %q, %v; want FATAL FG001 or FG002, then the connection closed", errs, err)
	}
	if got := e.values(t, "rt4_subabort"); len(got) != 1 || got[0] != "leader" {
		t.Errorf("rows %q, want the leader's alone", got)
	}
}

// TestRedTeam4SubabortTrap: a statement that traps query_canceled
// (TestSmuggleCancelTrap), sent by a zombie whose block is in a failed
// subtransaction: the status fencegate last saw stays 'E' while it runs,
// and the term's end must end it all the same (its backend terminated),
// or the trap holds the fence's row past the term's end.
func TestRedTeam4SubabortTrap(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	e.table(t, "rt4_subtrap")
	old, resign := e.lead(t, "rt4-subtrap")
	z := e.raw(t, "rt4-subtrap", old)
	if errs, st := z.query("BEGIN; INSERT INTO rt4_subtrap (v) VALUES ('zombie')"); len(errs) > 0 || st != 'T' {
		t.Fatalf("begin: %q %c", errs, st)
	}
	if errs, st := z.query("SAVEPOINT s; SELECT 1/0"); len(errs) != 1 || st != 'E' {
		t.Fatalf("savepoint: %q %c", errs, st)
	}
	const trap = "ROLLBACK TO SAVEPOINT s; DO $$ DECLARE i int := 0; BEGIN LOOP i := i + 1; BEGIN PERFORM pg_sleep(0.05); " +
		"EXCEPTION WHEN query_canceled THEN NULL; END; EXIT WHEN i > 200; END LOOP; END $$"
	z.send(&pgproto3.Query{String: trap})
	time.Sleep(300 * time.Millisecond)
	resign()
	cur, _ := e.lead(t, "rt4-subtrap")
	n := e.connect(t, "rt4-subtrap", cur)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := n.Exec(wctx, "INSERT INTO rt4_subtrap (v) VALUES ('leader')"); err != nil {
		t.Fatalf("the next leader's first write, after %v: %v (the trap, sent in a failed subtransaction, held the fence's row)", time.Since(start).Round(time.Millisecond), err)
	}
}
