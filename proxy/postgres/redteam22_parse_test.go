package postgres

import (
	"testing"

	"github.com/fencegate/fencegate/tokens"
)

// TestRedTeam22PrepareRunsDomainCheckUnfenced: Backend.exec prepares the
// statements a connection has not seen yet (prepare: Parse, Describe and a
// Sync of their own per statement) before it sends the write's fence
// check, on the premise that preparing runs nothing of the caller's. But
// PostgreSQL's parse analysis converts a literal with its type's input
// function, and array_in converts each element with the element type's:
// for an array of a domain that is domain_in, which evaluates the
// domain's CHECK, and a CHECK may call any function. That runs in the
// implicit transaction of the prepare's own Sync, which no fence check
// enters, and the server commits it. The same hole red team 19 found and
// fixed on the PostgreSQL listener (api/pgwire TestRedTeam19ParseRunsDomainCheck);
// the gRPC/HTTP path still has it.
//
// Attack: fence F's mark is 10 (the next leader wrote). F's zombie, token
// 5, sends one statement, SELECT '{1}'::d[], d being a domain whose
// CHECK calls a function that inserts a row (an application's audit
// trigger-like helper, say).
//
// What happens: the write is refused STALE_TOKEN, as it should be, but
// the zombie's row is committed already, by the Parse.
//
// Expected: a stale token writes nothing: no row, STALE_TOKEN.
//
// Severity: high. Rule 2 (a write lands only with its fence check, in one
// transaction) is broken for any statement text whose parse runs code,
// with no fence check and no role applied.
func TestRedTeam22PrepareRunsDomainCheckUnfenced(t *testing.T) {
	db := admin(t)
	table, fn, dom := unique("rt22_parse"), unique("rt22_w"), unique("rt22_dw")
	mustExec(t, db, "CREATE TABLE "+table+"(v text)")
	mustExec(t, db, "GRANT INSERT, SELECT ON "+table+" TO PUBLIC")
	mustExec(t, db, "CREATE FUNCTION "+fn+"(i int) RETURNS bool LANGUAGE plpgsql AS $$ BEGIN "+
		"INSERT INTO "+table+" VALUES ('zombie as ' || current_user); RETURN true; END $$")
	mustExec(t, db, "CREATE DOMAIN "+dom+" AS int CHECK ("+fn+"(VALUE))")

	b := openBackend(t, Config{MaxConns: 1})
	fence := unique("rt22_parse")
	if _, err := b.Exec(t.Context(), fence, 10, []Statement{{SQL: "SELECT 1"}}); err != nil {
		t.Fatal(err)
	}

	_, err := b.Exec(t.Context(), fence, 5, []Statement{{SQL: "SELECT '{1}'::" + dom + "[]"}})
	t.Logf("zombie (token 5, mark 10): %v", err)
	if r, ok := tokens.AsRefusal(err); !ok || r.Reason != tokens.ReasonStaleToken {
		t.Errorf("zombie's write: got %v, want STALE_TOKEN", err)
	}
	var rows []string
	r, err := db.Query(t.Context(), "SELECT v FROM "+table)
	if err != nil {
		t.Fatal(err)
	}
	for r.Next() {
		var v string
		if err := r.Scan(&v); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, v)
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) > 0 {
		t.Errorf("HOLE: a zombie with token 5 (mark 10) committed %q through the statement's prepare, before and without any fence check", rows)
	}
}

// TestRedTeam22PrepareEscapesRole: the prepare of a caller's statement
// (see TestRedTeam22PrepareRunsDomainCheckUnfenced) runs before the fence
// check's set_config('role', …, true), so what parse analysis runs, runs
// as fencegate's login: a member of fencegate_runtime and of every
// writer role. The rule's postgres_role, the boundary SECURITY.md
// promises ("statements get that role's privileges and no more"), does
// not apply to it. CheckRoles passes: the function is neither SECURITY
// DEFINER nor sets the role; it is an ordinary invoker's function, and
// run inside the write it would run as the writer role.
//
// Attack: the writer of fence A (role a_writer, may write table at only,
// owns a schema of its own where it created a function and a domain)
// sends SELECT '{1}'::d[], d's CHECK calling a function that calls
// fencegate.advance(B, 2^63-1) (fencegate_runtime only; first, while the
// prepare's transaction has no id yet) and inserts into table bt (fence
// B's, which a_writer may not touch).
//
// What happens: the row lands in bt written by the login, and B's mark
// goes to 9223372036854775807: B's real leader is STALE_TOKEN forever
// after, although A's write itself (as a_writer) could do neither.
//
// Expected: nothing of a write runs outside its role: bt empty, B's mark
// unmoved.
//
// Severity: high (a caller moves another fence's mark and writes another
// fence's tables).
func TestRedTeam22PrepareEscapesRole(t *testing.T) {
	w := newWriters(t)
	schema := unique("rt22_own")
	fn, dom := schema+".f", schema+".d"
	fenceB := unique("rt22_b")
	// A schema of a_writer's own, and in it objects a_writer created
	// (as it could through a login of its own): nothing fencegate's
	// checks look at.
	mustExec(t, w.db, "CREATE SCHEMA "+schema+" AUTHORIZATION "+w.aw)
	mustExec(t, w.db, "SET ROLE "+w.aw)
	mustExec(t, w.db, "CREATE FUNCTION "+fn+"(i int) RETURNS bool LANGUAGE plpgsql AS $$ BEGIN "+
		"PERFORM fencegate.advance('"+fenceB+"'::text, 9223372036854775807::bigint); "+
		"INSERT INTO "+w.bt+" VALUES (666); RETURN true; END $$")
	mustExec(t, w.db, "CREATE DOMAIN "+dom+" AS int CHECK ("+fn+"(VALUE))")
	mustExec(t, w.db, "RESET ROLE")

	b := w.open(t, Config{MaxConns: 1})
	if _, err := b.ExecAs(t.Context(), fenceB, 3, w.bw, []Statement{w.insert(w.bt)}); err != nil {
		t.Fatal(err)
	}
	mustExec(t, w.db, "DELETE FROM "+w.bt)

	// The control: as a_writer, the same function inside the write fails.
	_, err := b.ExecAs(t.Context(), unique("rt22_a"), 1, w.aw, []Statement{{SQL: "SELECT " + fn + "(1)"}})
	t.Logf("control, the function called inside the write as %s: %v", w.aw, err)

	_, err = b.ExecAs(t.Context(), unique("rt22_a"), 1, w.aw, []Statement{{SQL: "SELECT '{1}'::" + dom + "[]"}})
	t.Logf("literal of the domain, as %s: %v", w.aw, err)

	var n int
	if err := w.db.QueryRow(t.Context(), "SELECT count(*) FROM "+w.bt).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("HOLE: a write as %s put %d row(s) in %s, fence B's table it may not write", w.aw, n, w.bt)
	}
	if got := highWater(t, fenceB); got != 3 {
		t.Errorf("HOLE: a write as %s moved fence B's mark from 3 to %d", w.aw, got)
	}
}
