package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencegate/fencegate/election/pgterm"
)

// rt20TermTable makes a migrated database with fencegate's own login (gw,
// a member of fencegate_runtime), a victim fence whose mark is 100, and a
// worker login that may create in schema public, as in README's
// postgres-term pattern before the table was handed over. setup runs as
// the worker, while it still owns public.leadership_term (which setup
// creates). Then the admin does what serve's refusal (pgterm) and
// advance_term's FG006 hint say: ALTER TABLE ... OWNER TO fencegate_owner,
// and the grants of README. It checks that fencegate's term source accepts
// the table (serve would start) and returns the admin, fencegate's pool,
// the worker's connection, the DSN and the term source's refusal of the
// table (from migration 012 it refuses it: serve would not start).
func rt20TermTable(t *testing.T, setup []string) (admin, pool, worker *pgx.Conn, dsn string, openErr error) {
	t.Helper()
	ctx := t.Context()
	admin, pool = runtimeConn(t)
	login := fmt.Sprintf("rt20_worker_%d", dbSeq.Add(1))
	for _, sql := range []string{
		"CREATE ROLE " + login + " LOGIN",
		"GRANT CREATE ON SCHEMA public TO " + login,
		"SELECT fencegate.advance('rt20-victim', 100)",
		"SELECT fencegate.advance('rt20-victim-gw', 100)",
	} {
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	cfg := pool.Config().Copy()
	cfg.User = login
	worker, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = worker.Close(context.WithoutCancel(ctx)) })
	for _, sql := range setup {
		if _, err := worker.Exec(ctx, sql); err != nil {
			t.Fatalf("worker: %s: %v", sql, err)
		}
	}
	// The admin hands the table over, as the hint says, and grants what
	// README's postgres-term section grants; the worker keeps raising its
	// term.
	for _, sql := range []string{
		"ALTER TABLE public.leadership_term OWNER TO fencegate_owner",
		"GRANT SELECT, UPDATE (term) ON public.leadership_term TO fencegate_owner",
		"GRANT SELECT ON public.leadership_term TO " + pool.Config().User,
		"GRANT SELECT, INSERT, UPDATE ON public.leadership_term TO " + login,
	} {
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatalf("admin: %s: %v", sql, err)
		}
	}
	dsn = pool.Config().ConnString()
	src, err := pgterm.Open(ctx, pgterm.Config{DSN: dsn, Table: "public.leadership_term", LockKey: "hashtext", Poll: pgterm.DefaultPoll})
	if err != nil {
		t.Logf("fencegate's term source refuses the handed-over table (serve would not start): %v", err)
		return admin, pool, worker, dsn, err
	}
	src.Close()
	return admin, pool, worker, dsn, nil
}

// rt20Evil is a function of the worker's that lowers fence rt20-victim's
// mark to 1 when it runs as fencegate_owner, and rt20-victim-gw's with
// fencegate.reset (once per transaction) when it runs as a member of
// fencegate_runtime (fencegate's own login); otherwise it does nothing.
const rt20Evil = `CREATE FUNCTION public.rt20_evil() RETURNS void LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF current_user = 'fencegate_owner' THEN
        UPDATE fencegate.fences SET token = 1 WHERE name = 'rt20-victim';
    ELSIF pg_has_role(current_user, 'fencegate_runtime', 'USAGE')
          AND current_setting('rt20.done', true) IS DISTINCT FROM 'y' THEN
        PERFORM set_config('rt20.done', 'y', true);
        PERFORM fencegate.reset('rt20-victim-gw', 1);
    END IF;
END $$`

// TestRedTeam20TermTableIndexRunsAsOwner: the fix of red team 3 (migration
// 008, pgterm.resolve) trusts a term table once fencegate_owner (or a
// superuser) owns it, and both serve and advance_term tell the admin to
// run ALTER TABLE ... OWNER TO fencegate_owner. But an ownership change
// keeps every object the previous owner attached to the table. Here the
// worker, while it owned the table, created an expression index (README
// itself suggests one on hashtext(name)) on a function of its own,
// IMMUTABLE as an index requires, which calls a VOLATILE function of its
// own. ANALYZE (autovacuum's, after enough term raises, or anyone's) and
// REINDEX evaluate index expressions as the table's owner: now
// fencegate_owner, which owns fencegate.fences. So the worker's code
// rewrites any fence's mark.
//
// What happened: after the handover, the table passes every check
// (pgterm.Open succeeds, advance_term accepts it), and an ANALYZE of the
// table, which autovacuum runs by itself, lowers the victim's mark from
// 100 to 1 (a zombie of the victim fence may write again).
//
// What should happen: the victim's mark stays 100: the term table should
// be trusted only when nothing on it runs code of a role other than its
// trusted owner (no expression or partial index, statistics, policy,
// trigger, rule or column type referring to a function or type another
// role owns), or fencegate_owner should not own it at all (a separate,
// unprivileged NOLOGIN owner, with advance_term reading it through a
// role that can write nothing).
func TestRedTeam20TermTableIndexRunsAsOwner(t *testing.T) {
	ctx := t.Context()
	admin, _, worker, _, openErr := rt20TermTable(t, []string{
		"CREATE TABLE public.leadership_term (name text PRIMARY KEY, term bigint NOT NULL)",
		rt20Evil,
		`CREATE FUNCTION public.rt20_key(n text) RETURNS integer LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    PERFORM public.rt20_evil();
    RETURN pg_catalog.hashtext(n);
END $$`,
		"CREATE INDEX leadership_term_key ON public.leadership_term ((public.rt20_key(name)))",
		"INSERT INTO public.leadership_term VALUES ('rt20-mine', 1)",
	})
	// The worker goes on leading: its raises run the index function as
	// itself, harmlessly.
	if _, err := worker.Exec(ctx, "UPDATE public.leadership_term SET term = term + 1 WHERE name = 'rt20-mine'"); err != nil {
		t.Fatal(err)
	}
	if got := redteam2Mark(t, admin, "rt20-victim"); got != 100 {
		t.Fatalf("setup: victim's mark %d, want 100", got)
	}
	// From migration 012 fencegate refuses to serve on such a table, naming
	// the index and its function (pgterm.resolve, term_table_problem with
	// deep). It cannot undo the handover: an ANALYZE (autovacuum's) of the
	// adopted table still runs the function as fencegate_owner, which is
	// why README now has the admin create the table, never adopt one. So
	// the ANALYZE that showed the hole is not run here.
	if openErr == nil || !strings.Contains(openErr.Error(), "public.leadership_term") || !strings.Contains(openErr.Error(), "rt20_key") {
		t.Fatalf("HOLE: fencegate's term source on a handed-over table whose index runs the previous owner's function: %v; want a refusal naming the table and public.rt20_key", openErr)
	}
}

// TestRedTeam20TermTableCastRunsInCheck: as above, an ownership change
// keeps what the previous owner attached to the table, here the type of
// its name column: an enum of the worker's, with an IMPLICIT cast to text
// through a function of the worker's (CREATE CAST needs only ownership of
// the enum). advance_term compares t.name OPERATOR(pg_catalog.=) $1 with
// $1 text and hashes pg_catalog.hashtext(o.name): both apply the implicit
// cast, so the worker's function runs as fencegate_owner inside the fence
// check of its own fence, as red team 3's policy did. (fencegate's own
// term source reads the table too, and runs it as fencegate's login.)
//
// What happened: the worker's own fence check (advance_session, bound by
// fencegate's pool, no fencegate role) lowers the victim's mark from 100
// to 1.
//
// What should happen: the victim's mark stays 100 (advance_term should
// refuse a term table whose columns are not exactly text and bigint, or
// cast name to a type and compare in a way that no user cast can enter,
// and resolve should check the same).
func TestRedTeam20TermTableCastRunsInCheck(t *testing.T) {
	ctx := t.Context()
	admin, pool, worker, dsn, openErr := rt20TermTable(t, []string{
		"CREATE TYPE public.rt20_name AS ENUM ('rt20-mine', 'rt20-other')",
		rt20Evil,
		`CREATE FUNCTION public.rt20_to_text(n public.rt20_name) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    PERFORM public.rt20_evil();
    RETURN pg_catalog.textin(pg_catalog.enum_out(n));
END $$`,
		"CREATE CAST (public.rt20_name AS text) WITH FUNCTION public.rt20_to_text(public.rt20_name) AS IMPLICIT",
		// Its own = and <> (so that fencegate's term source, whose search
		// path has public, reads the table without an ambiguity).
		"CREATE FUNCTION public.rt20_eq(a public.rt20_name, b public.rt20_name) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT pg_catalog.enum_cmp(a, b) OPERATOR(pg_catalog.=) 0'",
		"CREATE FUNCTION public.rt20_ne(a public.rt20_name, b public.rt20_name) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT pg_catalog.enum_cmp(a, b) OPERATOR(pg_catalog.<>) 0'",
		"CREATE OPERATOR public.= (LEFTARG = public.rt20_name, RIGHTARG = public.rt20_name, FUNCTION = public.rt20_eq)",
		"CREATE OPERATOR public.<> (LEFTARG = public.rt20_name, RIGHTARG = public.rt20_name, FUNCTION = public.rt20_ne)",
		"CREATE TABLE public.leadership_term (name public.rt20_name PRIMARY KEY, term bigint NOT NULL)",
		"INSERT INTO public.leadership_term VALUES ('rt20-mine', 1)",
		"SELECT pg_advisory_lock(hashtext('rt20-mine'))",
	})
	if got := redteam2Mark(t, admin, "rt20-victim"); got != 100 {
		t.Fatalf("setup: victim's mark %d, want 100", got)
	}
	// fencegate's own term source refuses the table, from its catalog
	// rows alone, before reading it with the cast (migration 012).
	if openErr == nil || !strings.Contains(openErr.Error(), "public.leadership_term") || !strings.Contains(openErr.Error(), "column name") {
		t.Errorf("HOLE: fencegate's term source accepts a term table whose name column is of another role's type: %v; want a refusal naming the table and its column name", openErr)
		src, err := pgterm.Open(ctx, pgterm.Config{DSN: dsn, Table: "public.leadership_term", LockKey: "hashtext", Poll: pgterm.DefaultPoll})
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = src.Verify(ctx, "rt20-mine", 1)
		src.Close()
		t.Logf("the term source's read: %v", err)
	}
	if got := redteam2Mark(t, admin, "rt20-victim-gw"); got != 100 {
		t.Errorf("HOLE: fence rt20-victim-gw's mark moved from 100 to %d: the previous owner's cast ran as fencegate's login (fencegate_runtime) in the term source's read (Verify), and called fencegate.reset", got)
	}
	login := worker.Config().User
	if _, err := pool.Exec(ctx, "SELECT fencegate.bind_session($1, $2, 'rt20-mine', 'public.leadership_term', 'hashtext')",
		int32(worker.PgConn().PID()), login); err != nil {
		t.Fatal(err)
	}
	var mark int64
	err := worker.QueryRow(ctx, "SELECT fencegate.advance_session($1::pg_catalog.text, $2::pg_catalog.int8)", "rt20-mine", int64(1)).Scan(&mark)
	t.Logf("the worker's own fence check: mark %d, err %v", mark, err)
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); !ok || pgErr.Code != "FG006" {
		t.Errorf("the worker's own fence check on the handed-over table: mark %d, err %v; want SQLSTATE FG006", mark, err)
	}
	if got := redteam2Mark(t, admin, "rt20-victim"); got != 100 {
		t.Errorf("HOLE: the victim's mark moved from 100 to %d: the previous owner's implicit cast on the term table's name ran as fencegate_owner in the fence check", got)
	}
}
