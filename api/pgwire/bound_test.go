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
	"EXECUTE 'DEALLOC' || 'ATE fence' || 'gate_advance_1'; " +
	"EXECUTE 'PREP' || 'ARE fence' || 'gate_advance_1(text, int8) AS SELECT 0::int8'; END $$"

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
