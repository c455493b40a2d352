package migrations_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencegate/fencegate/election/pgterm"
)

// TestTermTableProblem: from version 12 advance_term (every write) and
// fencegate's term source (pgterm, at start) refuse a term table
// fencegate_owner or a superuser owns but whose reading could run code
// another role chose (fencegate.term_table_problem); the term source also
// refuses one whose indexes, statistics or columns depend on another
// role's functions or types, which ANALYZE runs as the table's owner.
// Tables are the admin's (a superuser's) unless a case hands something to
// a worker role.
func TestTermTableProblem(t *testing.T) {
	ctx := t.Context()
	admin, pool := runtimeConn(t)
	worker := fmt.Sprintf("tt_worker_%d", dbSeq.Add(1))
	if _, err := admin.Exec(ctx, "CREATE ROLE "+worker); err != nil {
		t.Fatal(err)
	}
	dsn := pool.Config().ConnString()
	const cols = "(name text PRIMARY KEY, term bigint NOT NULL)"
	for i, tc := range []struct {
		name  string
		setup string // %[1]s: the table; %[2]s: the worker role
		check string // advance_term's refusal, or "" when it reads the table
		open  string // the term source's refusal, or "" when it accepts it
	}{
		{"plain, README's index", "CREATE TABLE %[1]s " + cols + "; CREATE INDEX ON %[1]s ((pg_catalog.hashtext(name)))", "", ""},
		{"row security", "CREATE TABLE %[1]s " + cols + "; ALTER TABLE %[1]s ENABLE ROW LEVEL SECURITY", "has row-level security", "has row-level security"},
		{"forced row security", "CREATE TABLE %[1]s " + cols + "; ALTER TABLE %[1]s FORCE ROW LEVEL SECURITY", "has row-level security", "has row-level security"},
		{"rule", "CREATE TABLE %[1]s " + cols + "; CREATE RULE r AS ON UPDATE TO %[1]s DO ALSO NOTIFY tt", "has rules", "has rules"},
		{
			"trigger", "CREATE TABLE %[1]s " + cols + "; CREATE FUNCTION %[1]s_fn() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END';" +
				"CREATE TRIGGER g BEFORE UPDATE ON %[1]s FOR EACH ROW EXECUTE FUNCTION %[1]s_fn()", "has triggers", "has triggers",
		},
		{"referenced by a foreign key", "CREATE TABLE %[1]s " + cols + "; CREATE TABLE %[1]s_ref (n text REFERENCES %[1]s)", "", ""},
		{"inheritance child", "CREATE TABLE %[1]s " + cols + "; CREATE TABLE %[1]s_child () INHERITS (%[1]s)", "has inheritance children", "has inheritance children"},
		{"term int4", "CREATE TABLE %[1]s (name text PRIMARY KEY, term integer NOT NULL)", "column term of type integer", "column term of type integer"},
		{"name varchar", "CREATE TABLE %[1]s (name varchar PRIMARY KEY, term bigint NOT NULL)", "column name of type character varying", "column name of type character varying"},
		{"name a domain", "CREATE DOMAIN %[1]s_d AS text; CREATE TABLE %[1]s (name %[1]s_d PRIMARY KEY, term bigint NOT NULL)", "not pg_catalog.text", "not pg_catalog.text"},
		{"term text", "CREATE TABLE %[1]s (name text PRIMARY KEY, term text NOT NULL)", "column term of type text", "column term of type text"},
		{"a view", "CREATE VIEW %[1]s AS SELECT 'a'::text AS name, 1::bigint AS term", "is not a plain table", "is not a plain table"},
		{"owned by another role", "CREATE TABLE %[1]s " + cols + "; ALTER TABLE %[1]s OWNER TO %[2]s", "is owned by " + worker, "is owned by " + worker},
		{
			"index on another role's function", "CREATE FUNCTION %[1]s_k(n text) RETURNS integer LANGUAGE sql IMMUTABLE AS 'SELECT pg_catalog.hashtext(n)';" +
				"ALTER FUNCTION %[1]s_k(text) OWNER TO %[2]s; CREATE TABLE %[1]s " + cols + "; CREATE INDEX ON %[1]s ((%[1]s_k(name)))",
			"", "depending on function public.%[1]s_k(text), owned by " + worker,
		},
		{
			"partial index on another role's function", "CREATE FUNCTION %[1]s_p(n text) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT true';" +
				"ALTER FUNCTION %[1]s_p(text) OWNER TO %[2]s; CREATE TABLE %[1]s " + cols + "; CREATE INDEX ON %[1]s (term) WHERE %[1]s_p(name)",
			"", "depending on function public.%[1]s_p(text)",
		},
		{
			"statistics on another role's function", "CREATE FUNCTION %[1]s_s(n text) RETURNS integer LANGUAGE sql IMMUTABLE AS 'SELECT 1';" +
				"ALTER FUNCTION %[1]s_s(text) OWNER TO %[2]s; CREATE TABLE %[1]s " + cols + "; CREATE STATISTICS %[1]s_st ON (%[1]s_s(name)) FROM %[1]s",
			"", "statistics object public.%[1]s_st depending on function public.%[1]s_s(text)",
		},
		{
			"another column of another role's type", "CREATE TYPE %[1]s_e AS ENUM ('a'); ALTER TYPE %[1]s_e OWNER TO %[2]s;" +
				"CREATE TABLE %[1]s (name text PRIMARY KEY, term bigint NOT NULL, e %[1]s_e)",
			"", "depending on type public.%[1]s_e",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tbl := fmt.Sprintf("tt_%d", i)
			sub := strings.NewReplacer("%[1]s", tbl, "%[2]s", worker).Replace
			setup := sub(tc.setup) + fmt.Sprintf("; GRANT SELECT, UPDATE (term) ON %[1]s TO fencegate_owner; GRANT SELECT ON %[1]s TO %[2]s",
				tbl, pool.Config().User)
			if _, err := admin.Exec(ctx, setup); err != nil {
				t.Fatalf("%s: %v", setup, err)
			}
			// No row: a check that reads the table refuses with FG003.
			_, err := pool.Exec(ctx, "SELECT fencegate.advance_term('tt', 1, $1, 'hashtext')", "public."+tbl)
			pgErr, _ := errors.AsType[*pgconn.PgError](err)
			switch want := sub(tc.check); {
			case want == "" && (pgErr == nil || pgErr.Code != "FG003"):
				t.Errorf("advance_term: got %v, want FG003 (the table read)", err)
			case want != "" && (pgErr == nil || pgErr.Code != "FG006" || !strings.Contains(pgErr.Message, want)):
				t.Errorf("advance_term: got %v, want FG006 %q", err, want)
			}
			src, err := pgterm.Open(ctx, pgterm.Config{DSN: dsn, Table: "public." + tbl})
			switch want := sub(tc.open); {
			case want == "" && err != nil:
				t.Errorf("term source: got %v, want it open", err)
			case want != "" && (err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "term table public."+tbl+" ")):
				t.Errorf("term source: got %v, want a refusal naming public.%s and %q", err, tbl, want)
			}
			if err == nil {
				src.Close()
			}
		})
	}
}
