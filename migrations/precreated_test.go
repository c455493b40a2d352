package migrations_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/migrations"
)

// TestApplyRefusesPrecreated: Apply refuses a schema fencegate that exists
// before it, made or filled by a role that is neither fencegate_owner, the
// migrating role nor a superuser, naming the object and its owner; and
// from version 12 fencegate_owner owns tern's version table.
func TestApplyRefusesPrecreated(t *testing.T) {
	for _, tc := range []struct {
		name  string
		admin []string // run first, as the migrating superuser
		other []string // then as the other role, %s
		want  string   // %s: the other role
	}{
		{"schema", nil, []string{"CREATE SCHEMA fencegate"}, `schema fencegate is owned by "%s"`},
		{
			"table",
			[]string{"CREATE SCHEMA fencegate", "GRANT CREATE ON SCHEMA fencegate TO %s"},
			[]string{"CREATE TABLE fencegate.schema_version (version int4 NOT NULL)"},
			`table fencegate.schema_version is owned by "%s"`,
		},
		{
			"function",
			[]string{"CREATE SCHEMA fencegate", "GRANT CREATE ON SCHEMA fencegate TO %s"},
			[]string{"CREATE FUNCTION fencegate.advance(text, bigint) RETURNS bigint LANGUAGE sql AS 'SELECT 1::bigint'"},
			`function fencegate.advance(text,bigint) is owned by "%s"`,
		},
		{
			"type",
			[]string{"CREATE SCHEMA fencegate", "GRANT CREATE ON SCHEMA fencegate TO %s"},
			[]string{"CREATE TYPE fencegate.t AS ENUM ('a')"},
			`type fencegate.t is owned by "%s"`,
		},
		{
			"trigger",
			[]string{
				"CREATE SCHEMA fencegate", "CREATE TABLE fencegate.schema_version (version int4 NOT NULL)",
				"GRANT USAGE ON SCHEMA fencegate TO %s", "GRANT TRIGGER ON fencegate.schema_version TO %s",
			},
			[]string{
				"CREATE FUNCTION public.hook() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END'",
				"CREATE TRIGGER h BEFORE UPDATE ON fencegate.schema_version FOR EACH ROW EXECUTE FUNCTION public.hook()",
			},
			`trigger h on fencegate.schema_version (function hook()) is owned by "%s"`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			admin := connect(t, freshDB(t))
			role := fmt.Sprintf("pre_%d", dbSeq.Add(1))
			for _, sql := range append([]string{"CREATE ROLE " + role + " LOGIN", "GRANT CREATE ON DATABASE " +
				pgx.Identifier{admin.Config().Database}.Sanitize() + " TO " + role, "GRANT CREATE ON SCHEMA public TO " + role}, tc.admin...) {
				if _, err := admin.Exec(ctx, strings.ReplaceAll(sql, "%s", role)); err != nil {
					t.Fatalf("%s: %v", sql, err)
				}
			}
			cfg := admin.Config().Copy()
			cfg.User = role
			other, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close(context.WithoutCancel(ctx))
			for _, sql := range tc.other {
				if _, err := other.Exec(ctx, sql); err != nil {
					t.Fatalf("%s: %v", sql, err)
				}
			}
			err = migrations.Apply(ctx, admin)
			if want := fmt.Sprintf(tc.want, role); err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("Apply: got %v, want an error containing %q", err, want)
			}
			var fences bool
			if err := admin.QueryRow(ctx, "SELECT to_regclass('fencegate.fences') IS NOT NULL").Scan(&fences); err != nil || fences {
				t.Errorf("fencegate.fences after the refusal: exists %v, %v; want none", fences, err)
			}
		})
	}
	t.Run("version table owner", func(t *testing.T) {
		admin := connect(t, freshDB(t))
		if err := migrations.Apply(t.Context(), admin); err != nil {
			t.Fatal(err)
		}
		var owner string
		if err := admin.QueryRow(t.Context(), "SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = $1::regclass", migrations.VersionTable).Scan(&owner); err != nil {
			t.Fatal(err)
		}
		if owner != migrations.OwnerRole {
			t.Errorf("owner of %s: got %q, want %q", migrations.VersionTable, owner, migrations.OwnerRole)
		}
		if err := migrations.Apply(t.Context(), admin); err != nil {
			t.Errorf("Apply again: %v", err)
		}
	})
}
