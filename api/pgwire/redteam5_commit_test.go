package pgwire_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/fencegate/fencegate/api/pgwire"
)

// TestRedTeam5ReplacedCommitStatement: fencegate takes an Execute of a
// portal whose statement it classified as a transaction end (a named
// statement the client parsed as COMMIT) as the end of the open fenced
// transaction when its CommandComplete arrives (reply: ended =
// open.Swap(nil)). Plain SQL (DEALLOCATE, PREPARE) replaces that named
// statement with a query, as 062e9ea's review found for SET TRANSACTION:
// the server runs the query, the block stays open holding the fence's row
// (its check's lock), and fencegate no longer knows it as the session's
// transaction, so the term's end does not end it. The next leader's first
// write waits on the row; the zombie writes and commits after its term.
func TestRedTeam5ReplacedCommitStatement(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	const fence = "rt5-commit"
	e.table(t, "rt5_commit")
	old, resign := e.lead(t, fence)
	z := e.raw(t, fence, old)

	z.send(&pgproto3.Parse{Name: "rt5_c", Query: "COMMIT"}, &pgproto3.Sync{})
	if errs, _, err := z.results(1); err != nil || len(errs) > 0 {
		t.Fatalf("parse: %v %q", err, errs)
	}
	if errs, _ := z.query("DEALLOCATE rt5_c; PREPARE rt5_c AS SELECT 1"); len(errs) > 0 {
		t.Fatalf("replace: %q", errs)
	}
	if errs, st := z.query("BEGIN; INSERT INTO rt5_commit (v) VALUES ('zombie')"); len(errs) > 0 || st != 'T' {
		t.Fatalf("begin: %q %c", errs, st)
	}
	// "COMMIT", as fencegate sees it: the server runs SELECT 1.
	z.send(&pgproto3.Bind{PreparedStatement: "rt5_c"}, &pgproto3.Execute{}, &pgproto3.Sync{})
	errs, st, err := z.results(1)
	t.Logf("Execute of the replaced COMMIT: errors %q, status %c, %v", errs, st, err)

	resign()
	cur, _ := e.lead(t, fence)
	n := e.connect(t, fence, cur)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := n.Exec(wctx, "INSERT INTO rt5_commit (v) VALUES ('leader')"); err != nil {
		t.Errorf("HOLE: the next leader's first write, after %v: %v (the zombie's block, unknown to fencegate, held the fence's row past its term)",
			time.Since(start).Round(time.Millisecond), err)
	}
	z.send(&pgproto3.Query{String: "INSERT INTO rt5_commit (v) VALUES ('late'); COMMIT"})
	errs, st, err = z.results(1)
	t.Logf("the zombie after its term: errors %q, status %c, %v", errs, st, err)
	if err == nil {
		t.Errorf("HOLE: the zombie's transaction outlived its term (errors %q); want FATAL and the connection closed", errs)
	}
	for _, v := range e.values(t, "rt5_commit") {
		if strings.HasPrefix(v, "late") {
			t.Errorf("HOLE: row %q written by the zombie after its term ended", v)
		}
	}
}
