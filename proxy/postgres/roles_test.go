package postgres

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/migrations"
	"github.com/fencegate/fencegate/tokens"
)

// writers is a deployment with two fences' writer roles: aw may write
// table at only, bw table bt only, and fencegate's login (a runtime role
// with the use of every table, as an application's role would have) may
// become either (migrations.GrantRole).
type writers struct {
	db             *pgx.Conn // the superuser's
	login, dsn     string
	aw, bw, at, bt string
}

// setupMu serializes newWriters: GRANT … ON ALL TABLES from parallel
// tests races on the catalog ("tuple concurrently updated").
var setupMu sync.Mutex

func newWriters(tb testing.TB) *writers {
	tb.Helper()
	setupMu.Lock()
	defer setupMu.Unlock()
	w := &writers{db: admin(tb), login: unique("login"), aw: unique("a_writer"), bw: unique("b_writer"), at: unique("a_t"), bt: unique("b_t")}
	var err error
	if w.dsn, err = server.RuntimeRole(tb.Context(), w.login); err != nil {
		tb.Fatal(err)
	}
	for _, p := range [][2]string{{w.aw, w.at}, {w.bw, w.bt}} {
		mustExec(tb, w.db, "CREATE ROLE "+p[0]+" NOLOGIN")
		mustExec(tb, w.db, "CREATE TABLE "+p[1]+"(n int)")
		mustExec(tb, w.db, "GRANT SELECT, INSERT, UPDATE, DELETE ON "+p[1]+" TO "+p[0])
		if err := migrations.GrantRole(tb.Context(), w.db, w.login, p[0]); err != nil {
			tb.Fatal(err)
		}
	}
	return w
}

// open opens a backend logged in as the login, checked by CheckRoles.
func (w *writers) open(t *testing.T, cfg Config) *Backend {
	t.Helper()
	b, err := Open(t.Context(), w.dsn, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if err := b.CheckRoles(t.Context(), []string{w.aw, w.bw}); err != nil {
		t.Fatalf("CheckRoles: %v", err)
	}
	return b
}

func (w *writers) insert(table string) Statement {
	return Statement{SQL: "INSERT INTO " + table + " VALUES (1)"}
}

// TestExecAs: statements run with exactly the role's privileges and
// identity; a statement past them fails the whole write, fence check
// included; and the role ends with the write.
func TestExecAs(t *testing.T) {
	t.Parallel()
	w := newWriters(t)
	b := w.open(t, Config{MaxConns: 1})
	ctx := t.Context()
	fence := unique("a")

	res, err := b.ExecAs(ctx, fence, 1, w.aw, []Statement{
		w.insert(w.at),
		{SQL: "SELECT current_user::text, session_user::text"},
	})
	if err != nil {
		t.Fatalf("write as %s to its own table: %v", w.aw, err)
	}
	if got := res[1].Rows[0]; got[0] != w.aw || got[1] != w.login {
		t.Errorf("current_user, session_user: got %v, want [%s %s]", got, w.aw, w.login)
	}

	// The other fence's table: permission denied, and nothing of the write
	// stays, its own table and its fence's mark included.
	_, err = b.ExecAs(ctx, fence, 2, w.aw, []Statement{w.insert(w.at), w.insert(w.bt)})
	r := refusal(t, err, tokens.ReasonStatementFailed)
	if r.Metadata["sqlstate"] != "42501" || r.Metadata["statement"] != "1" {
		t.Errorf("write to %s: got %v (metadata %v), want sqlstate 42501 at statement 1", w.bt, err, r.Metadata)
	}
	if got := count(t, w.db, w.at); got != 1 {
		t.Errorf("rows in %s: got %d, want 1", w.at, got)
	}
	if got := count(t, w.db, w.bt); got != 0 {
		t.Errorf("rows in %s: got %d, want 0", w.bt, got)
	}
	if got := highWater(t, fence); got != 1 {
		t.Errorf("high-water mark of %s: got %d, want 1 (the refused write rolled back)", fence, got)
	}

	// The next write on the same connection, without a role, is the login's.
	res, err = b.Exec(ctx, fence, 1, []Statement{{SQL: "SELECT current_user::text"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := res[0].Rows[0][0]; got != w.login {
		t.Errorf("current_user after a write as %s: got %v, want %s", w.aw, got, w.login)
	}

	// Roles the login may not become.
	other := unique("c_writer")
	mustExec(t, w.db, "CREATE ROLE "+other+" NOLOGIN")
	mustExec(t, w.db, "GRANT INSERT ON "+w.at+" TO "+other)
	for _, tt := range []struct{ role, sqlstate string }{
		{other, "42501"},                // exists, not granted
		{unique("missing"), "22023"},    // does not exist
		{"postgres", "42501"},           // the superuser
		{migrations.OwnerRole, "42501"}, // fencegate's owner
	} {
		_, err := b.ExecAs(ctx, fence, 3, tt.role, []Statement{w.insert(w.at)})
		r := refusal(t, err, tokens.ReasonStatementFailed)
		if r.Metadata["sqlstate"] != tt.sqlstate || r.Metadata["role"] != tt.role || !strings.Contains(r.Msg, "fencegate grant") {
			t.Errorf("role %s: got %v (metadata %v), want sqlstate %s naming the role and fencegate grant", tt.role, err, r.Metadata, tt.sqlstate)
		}
		if got := count(t, w.db, w.at); got != 1 {
			t.Errorf("role %s: rows in %s: got %d, want 1", tt.role, w.at, got)
		}
		if got := highWater(t, fence); got != 1 {
			t.Errorf("role %s: high-water mark: got %d, want 1", tt.role, got)
		}
	}
	_, err = b.ExecAs(ctx, fence, 3, "none", []Statement{w.insert(w.at)})
	refusal(t, err, tokens.ReasonInvalidRequest)
}

// TestExecAsCoalesced: writes with different roles, and without one, share
// a round trip, each with its own role.
func TestExecAsCoalesced(t *testing.T) {
	t.Parallel()
	w := newWriters(t)
	b := w.open(t, Config{MaxConns: 1})
	roles := []string{w.aw, w.bw, "", w.aw, "", w.bw, w.bw, w.aw}
	got := make([]any, len(roles))
	errs := make([]error, len(roles))
	busy := occupy(t, b, 1, 300*time.Millisecond)
	s0 := b.Stats()
	var wg sync.WaitGroup
	for i, role := range roles {
		wg.Go(func() {
			var res []Result
			res, errs[i] = b.ExecAs(t.Context(), unique("fence"), 1, role, []Statement{{SQL: "SELECT current_user::text"}})
			if errs[i] == nil {
				got[i] = res[0].Rows[0][0]
			}
		})
	}
	wg.Wait()
	busy.Wait()
	s1 := b.Stats()
	for i, role := range roles {
		want := role
		if role == "" {
			want = w.login
		}
		if errs[i] != nil || got[i] != want {
			t.Errorf("write %d as %q: got %v, %v, want %s", i, role, got[i], errs[i], want)
		}
	}
	if calls, batches := s1.Calls-s0.Calls, s1.Batches-s0.Batches; batches >= calls {
		t.Errorf("%d writes in %d batches: want them coalesced", calls, batches)
	}
}

// TestRoleEscalation: a write as aw tries to write bt, the other fence's
// table, by leaving its role. Each attempt is refused, nothing is written
// to bt, and neither fence's mark moves. Each is then sent with its
// defence taken out (the SQL check off, or a superuser login, which
// CheckRoles refuses) and must then write bt: the test shows its own
// power.
func TestRoleEscalation(t *testing.T) {
	w := newWriters(t)
	bt := w.insert(w.bt)
	tests := []struct {
		name  string
		stmts []Statement
		// super: the SQL check alone does not stand here; the database
		// refuses because the login is not a superuser.
		super bool
	}{
		{name: "RESET ROLE", stmts: []Statement{{SQL: "RESET ROLE"}, bt}},
		{name: "SET ROLE", stmts: []Statement{{SQL: "SET ROLE " + w.bw}, bt}},
		{name: "SET LOCAL ROLE", stmts: []Statement{{SQL: "SET LOCAL ROLE " + w.bw}, bt}},
		{name: "set_config role", stmts: []Statement{{SQL: "SELECT set_config('role', '" + w.bw + "', true)"}, bt}},
		{name: "set_config role none", stmts: []Statement{{SQL: "SELECT pg_catalog.set_config('role', 'none', false)"}, bt}},
		{name: "SET SESSION AUTHORIZATION", stmts: []Statement{{SQL: "SET SESSION AUTHORIZATION " + w.bw}, bt}, super: true},
		{name: "set_config session_authorization", stmts: []Statement{{SQL: "SELECT set_config('session_authorization', '" + w.bw + "', false)"}, bt}, super: true},
		{name: "DO block", stmts: []Statement{{SQL: "DO $$ BEGIN SET LOCAL ROLE " + w.bw + "; INSERT INTO " + w.bt + " VALUES (1); END $$"}}},
		{name: "ROLLBACK then SET ROLE", stmts: []Statement{{SQL: "ROLLBACK"}, {SQL: "SET ROLE " + w.bw}, bt}},
		{name: "COMMIT then write", stmts: []Statement{{SQL: "COMMIT"}, bt}},
	}
	const bFence = "b_fence_roles"
	checked := w.open(t, Config{MaxConns: 1})
	if _, err := checked.ExecAs(t.Context(), bFence, 5, w.bw, []Statement{{SQL: "SELECT 1"}}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			aFence := unique("a_fence")
			if _, err := checked.ExecAs(t.Context(), aFence, 1, w.aw, []Statement{w.insert(w.at)}); err != nil {
				t.Fatal(err)
			}
			_, err := checked.ExecAs(t.Context(), aFence, 2, w.aw, tt.stmts)
			refusal(t, err, tokens.ReasonInvalidRequest) // the SQL check
			if got := count(t, w.db, w.bt); got != 0 {
				t.Errorf("rows in %s: got %d, want 0", w.bt, got)
			}
			if got := highWater(t, aFence); got != 1 {
				t.Errorf("mark of %s: got %d, want 1", aFence, got)
			}
			if got := highWater(t, bFence); got != 5 {
				t.Errorf("mark of %s: got %d, want 5", bFence, got)
			}
			// The next write on the connection is aw's again.
			res, err := checked.ExecAs(t.Context(), aFence, 1, w.aw, []Statement{{SQL: "SELECT current_user::text"}})
			if err != nil || res[0].Rows[0][0] != w.aw {
				t.Errorf("next write as %s: got %v, %v", w.aw, res, err)
			}

			t.Run("defence off", func(t *testing.T) {
				dsn := w.dsn
				if tt.super {
					// The SQL check off alone: the database still refuses.
					b, err := Open(t.Context(), w.dsn, Config{MaxConns: 1})
					if err != nil {
						t.Fatal(err)
					}
					defer b.Close()
					b.uncheckedSQL = true
					_, err = b.ExecAs(t.Context(), aFence, 3, w.aw, tt.stmts)
					if r := refusal(t, err, tokens.ReasonStatementFailed); r.Metadata["sqlstate"] != "42501" {
						t.Errorf("as a login that is not a superuser: got %v, want sqlstate 42501", err)
					}
					if got := count(t, w.db, w.bt); got != 0 {
						t.Errorf("as a login that is not a superuser: rows in %s: got %d, want 0", w.bt, got)
					}
					dsn = server.DSN()
				}
				b, err := Open(t.Context(), dsn, Config{MaxConns: 1})
				if err != nil {
					t.Fatal(err)
				}
				defer b.Close()
				b.uncheckedSQL = true
				_, err = b.ExecAs(t.Context(), aFence, 3, w.aw, tt.stmts)
				if got := count(t, w.db, w.bt); got == 0 {
					t.Errorf("the attack did not write %s with its defence off (it got %v): the test cannot tell it is stopped", w.bt, err)
				}
				mustExec(t, w.db, "DELETE FROM "+w.bt)
			})
		})
	}
}

// TestRoleEscalationThroughFunctions: functions that would run a
// statement as another role than its own. The SQL check cannot see into
// them: CheckRoles refuses to serve while one exists, and each is shown
// to write the other fence's table when it does.
func TestRoleEscalationThroughFunctions(t *testing.T) {
	w := newWriters(t)
	b := w.open(t, Config{MaxConns: 1})
	secdef := "CREATE FUNCTION %s() RETURNS int LANGUAGE sql SECURITY DEFINER AS $$ INSERT INTO " + w.bt + " VALUES (1) RETURNING 1 $$"
	tests := []struct{ name, create, owner string }{
		{"security definer owned by the login", secdef, w.login},
		{"security definer owned by the other role", secdef, w.bw},
		{"SET role on the function", "CREATE FUNCTION %s() RETURNS int LANGUAGE sql SET role = " + w.bw + " AS $$ INSERT INTO " + w.bt + " VALUES (1) RETURNING 1 $$", w.login},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fn := unique("escape")
			mustExec(t, w.db, strings.Replace(tt.create, "%s", fn, 1))
			mustExec(t, w.db, "ALTER FUNCTION "+fn+"() OWNER TO "+tt.owner)
			defer mustExec(t, w.db, "DROP FUNCTION "+fn+"()")

			err := b.CheckRoles(t.Context(), []string{w.aw, w.bw})
			if err == nil || !strings.Contains(err.Error(), fn) {
				t.Errorf("CheckRoles: got %v, want a refusal naming %s", err, fn)
			}
			// What CheckRoles stops: the call takes a write as aw to bt.
			if _, err := b.ExecAs(t.Context(), unique("a_fence"), 1, w.aw, []Statement{{SQL: "SELECT " + fn + "()"}}); err != nil {
				t.Errorf("the attack: %v", err)
			}
			if got := count(t, w.db, w.bt); got == 0 {
				t.Errorf("the function did not write %s: the test cannot tell CheckRoles stops anything", w.bt)
			}
			mustExec(t, w.db, "DELETE FROM "+w.bt)
		})
	}
	if err := b.CheckRoles(t.Context(), []string{w.aw, w.bw}); err != nil {
		t.Errorf("CheckRoles with the functions dropped: %v", err)
	}
	// A SECURITY DEFINER function the other roles may not execute is the
	// application's business.
	fn := unique("own")
	mustExec(t, w.db, strings.Replace(secdef, "%s", fn, 1))
	mustExec(t, w.db, "ALTER FUNCTION "+fn+"() OWNER TO "+w.bw)
	mustExec(t, w.db, "REVOKE EXECUTE ON FUNCTION "+fn+"() FROM PUBLIC")
	defer mustExec(t, w.db, "DROP FUNCTION "+fn+"()")
	if err := b.CheckRoles(t.Context(), []string{w.aw, w.bw}); err != nil {
		t.Errorf("CheckRoles with a function only its owner may run: %v", err)
	}
}

// TestCheckRoles: serving with roles is refused while statements could
// leave them.
func TestCheckRoles(t *testing.T) {
	t.Parallel()
	w := newWriters(t)
	ctx := t.Context()
	super, err := Open(ctx, server.DSN(), Config{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer super.Close()
	ddl, err := Open(ctx, w.dsn, Config{MaxConns: 1, AllowSQL: []string{"ddl"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ddl.Close()
	b := w.open(t, Config{MaxConns: 1})
	notGranted, superRole, ownerMember := unique("c_writer"), unique("super_writer"), unique("owner_writer")
	mustExec(t, w.db, "CREATE ROLE "+notGranted+" NOLOGIN")
	mustExec(t, w.db, "CREATE ROLE "+superRole+" NOLOGIN SUPERUSER")
	mustExec(t, w.db, "GRANT "+superRole+" TO "+w.login)
	mustExec(t, w.db, "CREATE ROLE "+ownerMember+" NOLOGIN IN ROLE "+migrations.OwnerRole)

	tests := []struct {
		name  string
		b     *Backend
		roles []string
		want  string // in the error; "" for none
		// before runs first: from it on, the login may become
		// fencegate_owner, and fencegate's SECURITY DEFINER functions
		// anyone may run (advance_session) are ones it would leave its
		// role by, so it comes after the cases that pass.
		before string
	}{
		{"no roles, superuser", super, nil, "", ""},
		{"granted", b, []string{w.aw, w.bw}, "", ""},
		{"superuser login", super, []string{w.aw}, "a superuser", ""},
		{"ddl allowed", ddl, []string{w.aw}, "ddl", ""},
		{"not granted", b, []string{w.aw, notGranted}, "fencegate grant --postgres-dsn=<an admin DSN> --login=" + w.login + " --role=" + notGranted, ""},
		{"missing", b, []string{"nobody_here"}, "does not exist", ""},
		{"superuser role", b, []string{superRole}, "is a superuser", ""},
		{"owner member", b, []string{ownerMember}, "member of " + migrations.OwnerRole, "GRANT " + ownerMember + " TO " + w.login},
		{"the login itself", b, []string{w.login}, "login itself", ""},
		{"none", b, []string{"none"}, "no role", ""},
	}
	for _, tt := range tests {
		if tt.before != "" {
			mustExec(t, w.db, tt.before)
		}
		err := tt.b.CheckRoles(ctx, tt.roles)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: got %v, want nil", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: got %v, want an error with %q", tt.name, err, tt.want)
		case err != nil && strings.Contains(err.Error(), "\n"):
			t.Errorf("%s: got %q, want one line", tt.name, err)
		}
	}
}
