package pgwire_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/api/pgwire"
)

// TestRedTeam8RoleCheckSearchPath: the listener refuses a login that may
// write the server's files or run its programs (pg_write_server_files,
// pg_execute_server_program), or write fencegate's tables, by a query it
// runs in the client's own session right after login (roleCheckSQL). That
// session's search_path is the client's: startup options
// '-c search_path=evil,pg_catalog' put a schema of the login's own before
// pg_catalog, and the query's unqualified '=' (inside `IN (...)`) then
// resolves to an operator of the login's, which answers false. The login is
// then let through although it holds the roles the check exists to refuse.
// The same bytes without the options are refused, so the refusal depends
// on a setting the client chooses.
func TestRedTeam8RoleCheckSearchPath(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	admin := e.admin
	type login struct {
		role, grant, what string
	}
	logins := []login{
		// rolname IN ('fencegate_owner', 'pg_write_server_files', 'pg_execute_server_program')
		{"rt8_prog", "GRANT pg_execute_server_program TO rt8_prog", "pg_execute_server_program"},
		// c.relkind IN ('r', 'p') in the table-privilege clause
		{"rt8_tbl", "GRANT SELECT, UPDATE ON fencegate.fences TO rt8_tbl", "a writer of fencegate.fences"},
	}
	for _, l := range logins {
		if _, err := pgServer.ListenerRole(ctx, l.role); err != nil {
			t.Fatal(err)
		}
		schema := l.role + "_evil"
		for _, sql := range []string{
			"DROP SCHEMA IF EXISTS " + schema + " CASCADE",
			"CREATE SCHEMA " + schema + " AUTHORIZATION " + l.role,
			l.grant,
		} {
			if _, err := admin.Exec(ctx, sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
		t.Cleanup(func() {
			bg := context.WithoutCancel(ctx)
			_, _ = admin.Exec(bg, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
			_, _ = admin.Exec(bg, "REVOKE pg_execute_server_program FROM rt8_prog")
			_, _ = admin.Exec(bg, "REVOKE ALL ON fencegate.fences FROM rt8_tbl")
		})
		// The login's own objects, made by the login itself in its own
		// schema: nothing a superuser does for it.
		own, err := pgx.Connect(ctx, pgServer.DSNAs(l.role))
		if err != nil {
			t.Fatal(err)
		}
		for _, sql := range []string{
			"CREATE FUNCTION " + schema + ".neq_name(pg_catalog.name, pg_catalog.name) RETURNS pg_catalog.bool LANGUAGE sql IMMUTABLE AS 'SELECT false'",
			"CREATE OPERATOR " + schema + ".= (LEFTARG = pg_catalog.name, RIGHTARG = pg_catalog.name, FUNCTION = " + schema + ".neq_name)",
			`CREATE FUNCTION ` + schema + `.neq_char(pg_catalog."char", pg_catalog."char") RETURNS pg_catalog.bool LANGUAGE sql IMMUTABLE AS 'SELECT false'`,
			`CREATE OPERATOR ` + schema + `.= (LEFTARG = pg_catalog."char", RIGHTARG = pg_catalog."char", FUNCTION = ` + schema + `.neq_char)`,
		} {
			if _, err := own.Exec(ctx, sql); err != nil {
				own.Close(ctx)
				t.Fatalf("as %s: %s: %v", l.role, sql, err)
			}
		}
		own.Close(ctx)
	}
	tok, _ := e.lead(t, "rt8-rolecheck")
	if _, err := admin.Exec(ctx, "SELECT fencegate.advance('rt8-victim', 1000)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.WithoutCancel(ctx), "SELECT fencegate.reset('rt8-victim', 0)") })
	for _, l := range logins {
		t.Run(l.role, func(t *testing.T) {
			// Without the options: refused, as it should be.
			c, err := pgx.Connect(ctx, e.dsn(l.role, "rt8-rolecheck", tok))
			if err == nil {
				c.Close(ctx)
				t.Fatalf("%s (%s) connected with no options: the check refuses it nowhere", l.role, l.what)
			}
			wantCode(t, err, "FG006")

			opts := optEscape(fmt.Sprintf("-c search_path=%s_evil,pg_catalog", l.role))
			c, err = pgx.Connect(ctx, e.dsn(l.role, "rt8-rolecheck", tok)+"&options="+opts)
			if err == nil {
				var sp string
				_ = c.QueryRow(ctx, "SHOW search_path").Scan(&sp)
				impact := ""
				if l.role == "rt8_tbl" {
					// What the refusal is for: another fence's mark,
					// lowered from a fenced session of this fence (dynamic
					// SQL: the text never names fencegate's schema).
					_, err := c.Exec(ctx, `DO $x$ BEGIN EXECUTE pg_catalog.format('UPDATE %I.fences SET token = 1 WHERE name OPERATOR(pg_catalog.=) %L', 'fence'||'gate', 'rt8-victim'); END $x$`)
					var mark uint64
					_ = e.admin.QueryRow(ctx, "SELECT token FROM fencegate.fences WHERE name = 'rt8-victim'").Scan(&mark)
					impact = fmt.Sprintf("; then lowering fence rt8-victim's mark from 1000: %v, mark now %d", err, mark)
				}
				c.Close(ctx)
				t.Fatalf("%s, %s, logged in through the listener with search_path %q: the role check's unqualified '=' "+
					"ran the login's own operator; want FATAL FG006 as without the option%s", l.role, l.what, sp, impact)
			}
			pe := wantCode(t, err, "FG006")
			if pe.Severity != "FATAL" || !strings.Contains(pe.Message, "role \""+l.role+"\"") {
				t.Fatalf("got %s %q, want FATAL refusing role %s", pe.Severity, pe.Message, l.role)
			}
		})
	}
}
