package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/proxy/postgres/throwaway"
)

// TestGrant: fencegate grant makes the login a member of the role, takes
// from the role whatever it had on fencegate's schema, and refuses, with
// one line, roles statements could leave or that reach past their tables.
func TestGrant(t *testing.T) {
	pg, err := throwaway.Start(t.Context(), throwaway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	admin, err := pgx.Connect(t.Context(), pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.WithoutCancel(t.Context()))
	exec := func(sql string) {
		t.Helper()
		if _, err := admin.Exec(t.Context(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	grant := func(args ...string) (string, error) {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), append([]string{"grant"}, args...), &stdout, &stderr)
		return stdout.String(), err
	}
	dsn := "--postgres-dsn=" + pg.DSN()
	exec("CREATE ROLE app LOGIN")
	exec("CREATE ROLE writer NOLOGIN")
	if _, err := grant(dsn, "--login=app", "--role=writer"); err == nil || !strings.Contains(err.Error(), "fencegate migrate") {
		t.Fatalf("before migrate: got %v, want an error saying to run fencegate migrate", err)
	}
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"migrate", dsn, "--runtime-role=app"}, &stdout, &stderr); err != nil {
		t.Fatalf("migrate: %v\n%s", err, stderr.String())
	}
	for _, sql := range []string{
		"CREATE ROLE su NOLOGIN SUPERUSER",
		"CREATE ROLE in_su NOLOGIN IN ROLE su",
		"CREATE ROLE rls NOLOGIN BYPASSRLS",
		"CREATE ROLE cr NOLOGIN CREATEROLE",
		"CREATE ROLE owner_member NOLOGIN IN ROLE fencegate_owner",
		"CREATE ROLE runtime_member NOLOGIN IN ROLE fencegate_runtime",
		"CREATE ROLE all_data NOLOGIN IN ROLE pg_write_all_data",
		"CREATE ROLE cycle NOLOGIN",
		"GRANT app TO cycle",
		"CREATE ROLE fencegate_x NOLOGIN",
		`CREATE ROLE "Odd ""Role"" x" NOLOGIN`,
		// Whatever the role had on fencegate's schema, grant takes away.
		"GRANT SELECT ON fencegate.fences TO writer",
		"GRANT EXECUTE ON FUNCTION fencegate.advance(text, bigint) TO writer",
	} {
		exec(sql)
	}

	tests := []struct {
		name string
		args []string
		want string // in the error; "" for success
	}{
		{"no dsn", []string{"--login=app", "--role=writer"}, "--postgres-dsn"},
		{"no login", []string{dsn, "--role=writer"}, "--login is required"},
		{"no role", []string{dsn, "--login=app"}, "--role is required"},
		{"missing login", []string{dsn, "--login=nobody", "--role=writer"}, `role "nobody" does not exist`},
		{"missing role", []string{dsn, "--login=app", "--role=nobody"}, `role "nobody" does not exist`},
		{"role is the login", []string{dsn, "--login=app", "--role=app"}, "login itself"},
		{"superuser", []string{dsn, "--login=app", "--role=su"}, "is a superuser"},
		{"member of a superuser", []string{dsn, "--login=app", "--role=in_su"}, "is a member of su, a superuser"},
		{"bypassrls", []string{dsn, "--login=app", "--role=rls"}, "BYPASSRLS"},
		{"createrole", []string{dsn, "--login=app", "--role=cr"}, "CREATEROLE"},
		{"owner member", []string{dsn, "--login=app", "--role=owner_member"}, "member of fencegate_owner"},
		{"runtime member", []string{dsn, "--login=app", "--role=runtime_member"}, "member of fencegate_runtime"},
		{"predefined role member", []string{dsn, "--login=app", "--role=all_data"}, "member of pg_write_all_data"},
		{"cycle", []string{dsn, "--login=app", "--role=cycle"}, "a cycle"},
		{"pg_ name", []string{dsn, "--login=app", "--role=pg_read_all_data"}, "reserved for PostgreSQL"},
		{"fencegate_ name", []string{dsn, "--login=app", "--role=fencegate_x"}, "reserved for fencegate"},
		{"granted", []string{dsn, "--login=app", "--role=writer"}, ""},
		{"granted again", []string{dsn, "--login=app", "--role=writer"}, ""},
		{"quoted name", []string{dsn, "--login=app", `--role=Odd "Role" x`}, ""},
	}
	for _, tt := range tests {
		out, err := grant(tt.args...)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: got %v, want success", tt.name, err)
		case tt.want == "" && !strings.Contains(out, "may run statements as role"):
			t.Errorf("%s: stdout got %q, want the grant confirmed", tt.name, out)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: got %v, want an error containing %q", tt.name, err, tt.want)
		case err != nil && strings.Contains(err.Error(), "\n"):
			t.Errorf("%s: error %q is more than one line", tt.name, err)
		}
	}

	var member, fences, advance, checkResult bool
	err = admin.QueryRow(t.Context(), `SELECT pg_has_role('app', 'writer', 'MEMBER') AND pg_has_role('app', 'Odd "Role" x', 'MEMBER'),
		has_table_privilege('writer', 'fencegate.fences', 'SELECT'),
		has_function_privilege('writer', 'fencegate.advance(text, bigint)', 'EXECUTE'),
		has_function_privilege('writer', 'fencegate.check_result(bigint, bigint, bigint, bigint)', 'EXECUTE')`).Scan(&member, &fences, &advance, &checkResult)
	if err != nil {
		t.Fatal(err)
	}
	if !member || fences || advance || !checkResult {
		t.Errorf("after grant: app member %v, writer reads fences %v, runs advance %v, runs check_result %v; want true, false, false, true",
			member, fences, advance, checkResult)
	}
}
