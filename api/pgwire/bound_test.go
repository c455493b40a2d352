package pgwire_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/api/pgwire"
)

// replaceCheck is SQL a client sends, in a transaction fencegate fenced,
// that swaps the fence check fencegate prepared on its server connection
// for a statement of the same name that checks nothing. Its text names
// neither fencegate's statement nor DEALLOCATE: only dynamic SQL does.
const replaceCheck = "DO $$ BEGIN " +
	"BEGIN EXECUTE 'DEALLOC' || 'ATE fence' || 'gate_check'; EXCEPTION WHEN invalid_sql_statement_name THEN NULL; END; " +
	"EXECUTE 'PREP' || 'ARE fence' || 'gate_check(text, int8) AS SELECT 0::int8'; END $$"

// TestCheckPreparedForEachTransaction: the listener prepares its check
// afresh in front of each extended-protocol transaction, so a client that
// replaced it in an earlier transaction (replaceCheck) gets the real
// check all the same. Its next transaction is fenced, and its own call
// of advance_session, which a replaced check would leave as the
// transaction's first, cannot fence the fence's next leaders out with a
// token of its choosing.
//
// With the check prepared once per session, as before, the same client
// writes unfenced and moves its fence's mark to 2^63-1.
func TestCheckPreparedForEachTransaction(t *testing.T) {
	ctx := t.Context()
	for _, tc := range []struct {
		name, fence string
		mode        string // pgx's default_query_exec_mode
		once        bool
	}{
		// The client's statements named: fencegate's check takes the
		// unnamed statement.
		{"prepared for each transaction, unnamed", "replaced-unnamed", "cache_statement", false},
		// The client's statements unnamed (Parse and Describe, then
		// Bind and Execute in the next segment): the check is closed
		// and prepared again under its name.
		{"prepared for each transaction, named", "replaced-named", "describe_exec", false},
		{"defence removed: prepared once per session", "replaced-once", "cache_statement", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, pgwire.Config{})
			if tc.once {
				e.srv.SetTestPrepareCheckOnce()
			}
			fence := tc.fence
			t.Cleanup(func() { // forget a poisoned mark, for the next run
				_, _ = e.admin.Exec(context.WithoutCancel(ctx), "SELECT fencegate.reset($1, 0)", fence)
			})
			e.table(t, "replaced")
			tok, _ := e.lead(t, fence)
			c := e.connectWith(t, fence, tok, "&default_query_exec_mode="+tc.mode)
			if _, err := c.Exec(ctx, "SELECT $1::int", 1); err != nil { // a transaction in the extended protocol: its check is prepared
				t.Fatal(err)
			}
			var named bool
			if err := c.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_prepared_statements WHERE name = 'fence' || 'gate_check')",
				pgx.QueryExecModeSimpleProtocol).Scan(&named); err != nil {
				t.Fatal(err)
			}
			if want := tc.mode == "describe_exec" || tc.once; named != want {
				t.Fatalf("the check prepared under its name: %v, want %v", named, want)
			}
			if _, err := c.Exec(ctx, replaceCheck); err != nil {
				t.Fatalf("replace the check: %v", err)
			}
			// Extended protocol: fencegate binds its check, then the
			// client's INSERT runs in the same transaction.
			_, insErr := c.Exec(ctx, "INSERT INTO replaced (v) VALUES ("+fencedMark+" || $1)", ":insert")
			const maxInt64 = "9223372036854775807"
			_, advErr := c.PgConn().ExecParams(ctx,
				"SELECT pg_catalog.query_to_xml('SELECT fence' || 'gate.advance_session(''"+fence+"'', "+maxInt64+")', true, true, '')",
				nil, nil, nil, nil).Close()
			got := e.values(t, "replaced")
			mark := markOf(t, e, fence)
			if !tc.once {
				if insErr != nil || len(got) != 1 || got[0] != fence+":insert" {
					t.Errorf("write after replacing the check: %v, stored %q; want it fenced (%q)", insErr, got, fence+":insert")
				}
				if code := wantCodeOf(advErr); code != "FG006" || !strings.Contains(advErr.Error(), "runs only as the first statement") {
					t.Errorf("advance_session after replacing the check: got %v, want FG006, runs only as the first statement", advErr)
				}
				if mark != tok {
					t.Errorf("fence %s's mark moved from %d to %d", fence, tok, mark)
				}
				return
			}
			if insErr != nil || advErr != nil || len(got) != 1 || got[0] != "UNFENCED:insert" || mark != 1<<63-1 {
				t.Fatalf("without the defence: write %v, stored %q, advance_session %v, mark %d; want an unfenced write and the mark at 2^63-1", insErr, got, advErr, mark)
			}
			t.Logf("without the defence: stored %q, and the mark moved from %d to %d", got, tok, mark)
		})
	}
}

// TestReplacedCheckCannotMoveOtherFences: a client of the listener that
// replaces the check fencegate prepared on its connection starts its next
// transaction (extended protocol: fencegate binds the prepared check)
// with no transaction id, so a first-statement guard alone does not stop
// it; query_to_xml runs SQL the statement's text does not show. Its login may not run reset or advance (it needs no fencegate role:
// the listener's check is advance_session), and advance_session checks
// only the fence its session is bound to: no other fence's mark moves.
//
// The same attack through a listener whose client logs in as a member of
// fencegate_runtime, as every listener login had to be before migration
// 008 (here with Insecure, which lets such a login in), lowers the
// victim's mark and then fences its leader out.
func TestReplacedCheckCannotMoveOtherFences(t *testing.T) {
	ctx := t.Context()
	if _, err := pgServer.RuntimeRole(ctx, "worker_rt"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		login    string
		insecure bool
		victim   string // a fence of its own: the second case poisons it
	}{
		{"listener login without fencegate roles", "worker", false, "victim-bound"},
		{"defence removed: listener login in fencegate_runtime", "worker_rt", true, "victim-unbound"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, pgwire.Config{Insecure: tc.insecure})
			// Prepared once, so the client can replace it: the listener
			// no longer lets it (TestCheckPreparedForEachTransaction),
			// and this is the binding that stands behind that.
			e.srv.SetTestPrepareCheckOnce()
			t.Cleanup(func() { // forget a poisoned mark, for the next run
				_, _ = e.admin.Exec(context.WithoutCancel(ctx), "SELECT fencegate.reset($1, 0)", tc.victim)
			})
			victim, _ := e.lead(t, tc.victim)
			vc := e.connect(t, tc.victim, victim)
			if _, err := vc.Exec(ctx, "SELECT 1"); err != nil { // the victim's mark is its term
				t.Fatal(err)
			}
			tok, _ := e.lead(t, "attacker")
			c, err := pgx.Connect(ctx, e.dsn(tc.login, "attacker", tok))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(context.WithoutCancel(ctx))
			if _, err := c.Exec(ctx, "SELECT $1::int", 1); err != nil { // a transaction in the extended protocol: its check is prepared
				t.Fatal(err)
			}

			const maxInt64 = "9223372036854775807"
			attacks := []struct{ name, call, code, msg string }{
				{"reset", "reset(''" + tc.victim + "'', 1)", "42501", "permission denied for function reset"},
				{"advance", "advance(''" + tc.victim + "'', " + maxInt64 + ")", "42501", "permission denied for function advance"},
				{"advance_session", "advance_session(''" + tc.victim + "'', " + maxInt64 + ")", "FG006", "bound to fence 'attacker', not '" + tc.victim + "'"},
			}
			moved := 0
			for _, a := range attacks {
				if _, err := c.Exec(ctx, replaceCheck); err != nil {
					t.Fatalf("%s: replace the check: %v", a.name, err)
				}
				// Extended protocol, so fencegate binds its (replaced)
				// prepared check before the client's statement, which
				// runs SQL of its own making (DO is refused there).
				sql := "SELECT pg_catalog.query_to_xml('SELECT fence' || 'gate." + a.call + "', true, true, '')"
				_, err := c.PgConn().ExecParams(ctx, sql, nil, nil, nil, nil).Close()
				mark := markOf(t, e, tc.victim)
				if !tc.insecure {
					if code := wantCodeOf(err); code != a.code || !strings.Contains(err.Error(), a.msg) {
						t.Errorf("%s: got %v, want SQLSTATE %s: %s", a.name, err, a.code, a.msg)
					}
					if mark != victim {
						t.Errorf("%s: victim's mark moved from %d to %d", a.name, victim, mark)
					}
					continue
				}
				if err == nil && mark != victim {
					moved++
					t.Logf("%s: the victim's mark moved from %d to %d", a.name, victim, mark)
				}
			}
			_, err = vc.Exec(ctx, "SELECT 1")
			if !tc.insecure {
				if err != nil {
					t.Fatalf("victim's leader after the attacks: %v", err)
				}
				return
			}
			if moved < 2 || wantCodeOf(err) != "FG001" {
				t.Fatalf("without the defence: %d attacks moved the victim's mark, and its leader's write got %v; want the attacks to move it and the leader to be fenced out (FG001)", moved, err)
			}
		})
	}
}

func markOf(t *testing.T, e *env, fence string) uint64 {
	t.Helper()
	var mark uint64
	if err := e.admin.QueryRow(t.Context(), "SELECT token FROM fencegate.fences WHERE name = $1", fence).Scan(&mark); err != nil {
		t.Fatal(err)
	}
	return mark
}

// TestListenerRefusesLoginsThatReachOtherFences: a login that may run
// fencegate's own functions for any fence (fencegate's --postgres-dsn
// login, a member of fencegate_runtime; or one granted one of them
// directly, or a member with NOINHERIT that could SET ROLE to it) is
// refused at its start; and a session fencegate did not bind (a direct
// one) may run advance_session for no fence.
func TestListenerRefusesLoginsThatReachOtherFences(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	if _, err := pgServer.RuntimeRole(ctx, "rt_member"); err != nil {
		t.Fatal(err)
	}
	for _, role := range []string{"reset_grantee", "noinherit_member"} {
		if _, err := pgServer.ListenerRole(ctx, role); err != nil {
			t.Fatal(err)
		}
	}
	for _, sql := range []string{
		"GRANT EXECUTE ON FUNCTION fencegate.reset(text, bigint) TO reset_grantee",
		"ALTER ROLE noinherit_member NOINHERIT",
		"GRANT fencegate_runtime TO noinherit_member",
	} {
		if _, err := e.admin.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	tok, _ := e.lead(t, "jobs")
	for _, login := range []string{"gateway", "rt_member", "reset_grantee", "noinherit_member"} {
		t.Run(login, func(t *testing.T) {
			c, err := pgx.Connect(ctx, e.dsn(login, "jobs", tok))
			if err == nil {
				c.Close(ctx)
				t.Fatal("connected")
			}
			pe := wantCode(t, err, "FG006")
			if pe.Severity != "FATAL" || !strings.Contains(pe.Message, "fencegate_runtime") {
				t.Fatalf("got %s %q, want FATAL naming fencegate_runtime", pe.Severity, pe.Message)
			}
		})
	}
	// The worker's own session, straight to the database.
	direct, err := pgx.Connect(ctx, pgServer.DSNAs("worker"))
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close(context.WithoutCancel(ctx))
	_, err = direct.Exec(ctx, "SELECT fencegate.advance_session('jobs', 9223372036854775807)")
	if code := wantCodeOf(err); code != "FG006" || !strings.Contains(err.Error(), "not bound to a fence") {
		t.Fatalf("advance_session in a session fencegate did not bind: got %v, want FG006: not bound to a fence", err)
	}
}

// TestListenerServesOneDatabase: a client naming another database of the
// server is refused at its start: fencegate binds sessions, and keeps the
// fences, in --postgres-dsn's database only.
func TestListenerServesOneDatabase(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	tok, _ := e.lead(t, "jobs")
	dsn := strings.Replace(e.dsn("worker", "jobs", tok), "/postgres?", "/template1?", 1)
	c, err := pgx.Connect(ctx, dsn)
	if err == nil {
		c.Close(ctx)
		t.Fatal("connected to template1")
	}
	pe := wantCode(t, err, "FG006")
	if pe.Severity != "FATAL" || !strings.Contains(pe.Message, `this listener serves database "postgres"`) {
		t.Fatalf("got %s %q, want FATAL naming database postgres", pe.Severity, pe.Message)
	}
}
