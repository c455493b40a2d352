package pgwire_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/api/pgwire"
)

// redteam3Dynamic wraps sql in a DO block whose text names nothing of
// fencegate's (the listener refuses statements that do): dynamic SQL.
func redteam3Dynamic(sql string) string {
	return "DO $rt3$ BEGIN EXECUTE convert_from(decode('" + fmt.Sprintf("%x", sql) + "', 'hex'), 'UTF8'); END $rt3$"
}

// redteam3Attack sets up a victim fence whose leader wrote (its mark is
// its term), a listener login made by setup (a ListenerRole, then the
// statements given, as an admin would), connects as it through the
// listener for fence attacker and runs the attack's statements; it
// returns the victim's term and mark after, and the error of the login or
// the attack.
func redteam3Attack(t *testing.T, login string, setup, attack []string) (term, mark uint64, err error) {
	t.Helper()
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	if _, err := pgServer.ListenerRole(ctx, login); err != nil {
		t.Fatal(err)
	}
	for _, sql := range setup {
		if _, err := e.admin.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	victimFence := "rt3-victim-" + login
	// An attack may move every fence's mark: put back the marks of the
	// fences other tests left, and forget the victim's.
	var names []string
	var marks []int64
	rows, err := e.admin.Query(ctx, "SELECT name, token FROM fencegate.fences")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		var m int64
		if err := rows.Scan(&n, &m); err != nil {
			t.Fatal(err)
		}
		names, marks = append(names, n), append(marks, m)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx := context.WithoutCancel(ctx)
		for i, n := range names {
			_, _ = e.admin.Exec(cctx, "UPDATE fencegate.fences SET token = $2 WHERE name = $1", n, marks[i])
		}
		_, _ = e.admin.Exec(cctx, "SELECT fencegate.reset($1, 0)", victimFence)
		_, _ = e.admin.Exec(cctx, "REVOKE fencegate_owner FROM "+login)
	})
	term, _ = e.lead(t, victimFence)
	vc := e.connect(t, victimFence, term)
	if _, err := vc.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	tok, _ := e.lead(t, "rt3-attacker-"+login)
	c, err := pgx.Connect(ctx, e.dsn(login, "rt3-attacker-"+login, tok))
	if err == nil {
		defer c.Close(context.WithoutCancel(ctx))
		for _, sql := range attack {
			if _, err = c.Exec(ctx, sql); err != nil {
				err = fmt.Errorf("%s: %w", sql, err)
				break
			}
		}
	}
	return term, markOf(t, e, victimFence), err
}

// TestRedTeam3CreateRoleLogin: the listener's role check refuses logins
// that are or may become a superuser, fencegate_owner or a role that may
// run fencegate's functions, but not a login with CREATEROLE. On
// PostgreSQL 15 and earlier (the version the harness runs) CREATEROLE may
// grant membership in any role that is not a superuser: the client grants
// itself fencegate_owner, becomes it, and rewrites any fence's mark.
// (docs/SECURITY.md's own checks for postgres_role refuse CREATEROLE.)
func TestRedTeam3CreateRoleLogin(t *testing.T) {
	login := "rt3_createrole"
	term, mark, err := redteam3Attack(t, login,
		[]string{"ALTER ROLE " + login + " CREATEROLE"},
		[]string{
			"GRANT fencegate_owner TO " + login,
			"SET ROLE fencegate_owner",
			redteam3Dynamic("UPDATE fencegate.fences SET token = 1 WHERE name = 'rt3-victim-" + login + "'"),
		})
	if code := wantCodeOf(err); code != "FG006" {
		t.Errorf("login or attack: got %v, want the listener's FATAL FG006 at login", err)
	}
	if mark != term {
		t.Fatalf("a CREATEROLE login of the listener moved another fence's mark from %d to %d", term, mark)
	}
}

// TestRedTeam3WriteAllDataLogin: a login that is a member of the
// predefined role pg_write_all_data (INSERT, UPDATE, DELETE on every
// table, USAGE on every schema) passes the listener's role check, and may
// write fencegate.fences (and fencegate.sessions) itself. An UPDATE with
// no WHERE clause needs no SELECT privilege.
func TestRedTeam3WriteAllDataLogin(t *testing.T) {
	login := "rt3_writealldata"
	term, mark, err := redteam3Attack(t, login,
		[]string{"GRANT pg_write_all_data TO " + login},
		[]string{redteam3Dynamic("UPDATE fencegate.fences SET token = 1")})
	if code := wantCodeOf(err); code != "FG006" {
		t.Errorf("login or attack: got %v, want the listener's FATAL FG006 at login", err)
	}
	if mark != term {
		t.Fatalf("a pg_write_all_data login of the listener moved another fence's mark from %d to %d", term, mark)
	}
}

// TestRedTeam3AdvanceMarkGrantee (defended): the role check does not look
// at fencegate.advance_mark, but a login granted EXECUTE on it still
// cannot move another fence's mark: advance_mark is SECURITY INVOKER and
// the login has no privilege on fencegate.fences (even with the setting
// fencegate.fenced cleared first).
func TestRedTeam3AdvanceMarkGrantee(t *testing.T) {
	login := "rt3_markgrantee"
	term, mark, err := redteam3Attack(t, login,
		[]string{"GRANT EXECUTE ON FUNCTION fencegate.advance_mark(text, bigint) TO " + login},
		[]string{redteam3DynamicPerform("fencegate.advance_mark('rt3-victim-" + login + "', 9223372036854775807)")})
	if code := wantCodeOf(err); code != "42501" {
		t.Errorf("advance_mark for another fence: got %v, want SQLSTATE 42501", err)
	}
	if mark != term {
		t.Fatalf("an advance_mark grantee moved another fence's mark from %d to %d", term, mark)
	}
}

// redteam3DynamicPerform is redteam3Dynamic for a call, after clearing
// the once-per-transaction mark fencegate.fenced (as a client can).
func redteam3DynamicPerform(call string) string {
	return redteam3Dynamic("SELECT pg_catalog.set_config('fencegate.fenced', '', true), " + call)
}
