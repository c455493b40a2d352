package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/migrations"
	"github.com/fencegate/fencegate/proxy/postgres"
	"github.com/fencegate/fencegate/proxy/postgres/throwaway"
	"github.com/fencegate/fencegate/tokens"
)

// redteam2Roles makes a migrated database with a login (member of
// fencegate_runtime) and a writer role, unique names, and a fence whose
// mark is 100. It returns the admin connection, the DSN and the names.
func redteam2Roles(t *testing.T) (admin *pgx.Conn, dsn, login, role, fence string) {
	t.Helper()
	ctx := t.Context()
	dsn = freshDB(t)
	admin = connect(t, dsn)
	if err := migrations.Apply(ctx, admin); err != nil {
		t.Fatal(err)
	}
	n := dbSeq.Add(1)
	login, role, fence = fmt.Sprintf("rt2_login_%d", n), fmt.Sprintf("rt2_writer_%d", n), fmt.Sprintf("rt2-fence-%d", n)
	for _, sql := range []string{
		"CREATE ROLE " + login + " LOGIN",
		"CREATE ROLE " + role + " NOLOGIN",
	} {
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if err := migrations.GrantRuntime(ctx, admin, login); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "SELECT fencegate.advance($1, 100)", fence); err != nil {
		t.Fatal(err)
	}
	return admin, dsn, login, role, fence
}

// redteam2AsRole runs sql as role inside a transaction of login, the way
// fencegate runs a write's statements (SET LOCAL ROLE), and rolls back
// only on error.
func redteam2AsRole(t *testing.T, dsn, login, role, sql string, args ...any) error {
	t.Helper()
	ctx := t.Context()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.User = login
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_catalog.set_config('role', $1, true)", role); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, sql, args...)
		return err
	})
}

func redteam2Mark(t *testing.T, admin *pgx.Conn, fence string) int64 {
	t.Helper()
	var mark int64
	err := admin.QueryRow(t.Context(), "SELECT token FROM fencegate.fences WHERE name = $1", fence).Scan(&mark)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return mark
}

// TestRedTeam2GrantInheritedPrivileges: API.md says `fencegate grant`
// "leaves ROLE nothing on fencegate's own schema". A role that reaches
// fencegate's schema through a group it is a member of (privileges an
// admin once gave a group) must be refused, or left unable to use them.
func TestRedTeam2GrantInheritedPrivileges(t *testing.T) {
	ctx := t.Context()
	admin, dsn, login, role, fence := redteam2Roles(t)
	group := role + "_group"
	for _, sql := range []string{
		"CREATE ROLE " + group + " NOLOGIN",
		"GRANT SELECT, UPDATE, DELETE, TRUNCATE ON fencegate.fences TO " + group,
		"GRANT EXECUTE ON FUNCTION fencegate.reset(text, bigint) TO " + group,
		"GRANT CREATE ON SCHEMA fencegate TO " + group,
		"GRANT " + group + " TO " + role,
	} {
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if err := migrations.GrantRole(ctx, admin, login, role); err != nil {
		t.Logf("GrantRole refused the role (safe): %v", err)
		return
	}
	var upd, exe, create bool
	if err := admin.QueryRow(ctx, `SELECT has_table_privilege($1, 'fencegate.fences', 'UPDATE'),
	       has_function_privilege($1, 'fencegate.reset(text, bigint)', 'EXECUTE'),
	       has_schema_privilege($1, 'fencegate', 'CREATE')`, role).Scan(&upd, &exe, &create); err != nil {
		t.Fatal(err)
	}
	t.Logf("after GrantRole: %s may UPDATE fencegate.fences: %v, EXECUTE fencegate.reset: %v, CREATE in fencegate: %v", role, upd, exe, create)
	errUpd := redteam2AsRole(t, dsn, login, role, "UPDATE fencegate.fences SET token = 1 WHERE name = $1", fence)
	t.Logf("UPDATE fencegate.fences as %s: %v", role, errUpd)
	if got := redteam2Mark(t, admin, fence); got != 100 {
		t.Errorf("after GrantRole accepted %s: statements run as it lowered fence %s's mark from 100 to %d (UPDATE fencegate.fences through group %s)", role, fence, got, group)
	}
	if _, err := admin.Exec(ctx, "UPDATE fencegate.fences SET token = 100 WHERE name = $1", fence); err != nil {
		t.Fatal(err)
	}
	errReset := redteam2AsRole(t, dsn, login, role, "SELECT fencegate.reset($1, 1)", fence)
	t.Logf("fencegate.reset as %s in a transaction of its own: %v", role, errReset)
	if got := redteam2Mark(t, admin, fence); got != 100 {
		t.Errorf("after GrantRole accepted %s: it called fencegate.reset and lowered fence %s's mark from 100 to %d (EXECUTE through group %s)", role, fence, got, group)
	}
	errCreate := redteam2AsRole(t, dsn, login, role, "CREATE TABLE fencegate.rt2_planted (x int)")
	t.Logf("CREATE TABLE fencegate.rt2_planted as %s: %v", role, errCreate)
	if errCreate == nil {
		t.Errorf("after GrantRole accepted %s: statements run as it created objects in schema fencegate (through group %s)", role, group)
	}
}

// TestRedTeam2GrantOptionChain: privileges on fencegate's table that a
// role got from a grantor other than the owner (one given WITH GRANT
// OPTION) must be gone after `fencegate grant` too, or the role refused.
func TestRedTeam2GrantOptionChain(t *testing.T) {
	ctx := t.Context()
	admin, dsn, login, role, fence := redteam2Roles(t)
	grantor := role + "_grantor"
	for _, sql := range []string{
		"CREATE ROLE " + grantor + " NOLOGIN",
		"GRANT SELECT, UPDATE ON fencegate.fences TO " + grantor + " WITH GRANT OPTION",
		"SET ROLE " + grantor,
		"GRANT SELECT, UPDATE ON fencegate.fences TO " + role,
		"RESET ROLE",
	} {
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if err := migrations.GrantRole(ctx, admin, login, role); err != nil {
		t.Logf("GrantRole refused the role (safe): %v", err)
		return
	}
	var acl string
	if err := admin.QueryRow(ctx, "SELECT coalesce(relacl::text, '') FROM pg_class WHERE oid = 'fencegate.fences'::regclass").Scan(&acl); err != nil {
		t.Fatal(err)
	}
	t.Logf("fencegate.fences ACL after GrantRole: %s", acl)
	err := redteam2AsRole(t, dsn, login, role, "UPDATE fencegate.fences SET token = 1 WHERE name = $1", fence)
	t.Logf("UPDATE fencegate.fences as %s: %v", role, err)
	if got := redteam2Mark(t, admin, fence); got != 100 {
		t.Errorf("after GrantRole accepted %s: statements run as it lowered fence %s's mark from 100 to %d (UPDATE granted by %s, not revoked)", role, fence, got, grantor)
	}
}

// TestRedTeam2GrantColumnPrivilege: a column privilege on the fences'
// token (UPDATE (token)) is taken away by `fencegate grant` as well.
func TestRedTeam2GrantColumnPrivilege(t *testing.T) {
	ctx := t.Context()
	admin, dsn, login, role, fence := redteam2Roles(t)
	if _, err := admin.Exec(ctx, "GRANT SELECT (name), UPDATE (token) ON fencegate.fences TO "+role); err != nil {
		t.Fatal(err)
	}
	if err := migrations.GrantRole(ctx, admin, login, role); err != nil {
		t.Logf("GrantRole refused the role (safe): %v", err)
		return
	}
	var colUpd bool
	if err := admin.QueryRow(ctx, "SELECT has_column_privilege($1, 'fencegate.fences', 'token', 'UPDATE')", role).Scan(&colUpd); err != nil {
		t.Fatal(err)
	}
	t.Logf("after GrantRole: %s may UPDATE (token): %v", role, colUpd)
	err := redteam2AsRole(t, dsn, login, role, "UPDATE fencegate.fences SET token = 1 WHERE name = $1", fence)
	t.Logf("UPDATE (token) as %s: %v", role, err)
	if got := redteam2Mark(t, admin, fence); got != 100 {
		t.Errorf("column privilege survived GrantRole: mark lowered from 100 to %d", got)
	}
}

// TestRedTeam2ResetAsWriterRole: a writer role that fencegate grant
// accepted cannot call reset, advance, advance_mark or advance_term, nor
// write the fences, even in a transaction of its own (no fence check
// before it).
func TestRedTeam2ResetAsWriterRole(t *testing.T) {
	ctx := t.Context()
	admin, dsn, login, role, fence := redteam2Roles(t)
	if err := migrations.GrantRole(ctx, admin, login, role); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		"SELECT fencegate.reset($1, 1)",
		"SELECT fencegate.advance($1, 1000)",
		"SELECT fencegate.advance_mark($1, 1000)",
		"SELECT fencegate.advance_term($1, 1000, 'pg_catalog.pg_class', 'hashtext')",
		"UPDATE fencegate.fences SET token = 1 WHERE name = $1",
		"DELETE FROM fencegate.fences WHERE name = $1",
		"INSERT INTO fencegate.fences (name, token) VALUES ($1, 1) ON CONFLICT (name) DO UPDATE SET token = 1",
		"SELECT $1::text, pg_catalog.set_config('search_path', 'fencegate', true); DELETE FROM fences",
		"CREATE FUNCTION fencegate.advance_mark(text, integer) RETURNS bigint LANGUAGE sql AS 'SELECT 1::bigint' -- $1",
		"ALTER FUNCTION fencegate.reset(text, bigint) SECURITY INVOKER -- $1",
	} {
		err := redteam2AsRole(t, dsn, login, role, sql, fence)
		if err == nil {
			t.Errorf("as writer role %s: %q succeeded", role, sql)
		}
		if got := redteam2Mark(t, admin, fence); got != 100 {
			t.Fatalf("as writer role %s: %q moved the mark from 100 to %d", role, sql, got)
		}
	}
}

// TestRedTeam2ResetInsideReadOnlyTransaction: the runtime role in a
// read-only transaction passes advance without a transaction id (007's
// read-only path) and can clear fencegate.fenced; reset must still not
// lower a mark there.
func TestRedTeam2ResetInsideReadOnlyTransaction(t *testing.T) {
	ctx := t.Context()
	admin, dsn, login, _, fence := redteam2Roles(t)
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.User = login
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	for _, q := range []string{
		"BEGIN READ ONLY; SELECT fencegate.advance('mine', 5); SELECT set_config('fencegate.fenced', '', true); SELECT fencegate.reset('" + fence + "', 1); COMMIT",
		"BEGIN READ ONLY; SELECT fencegate.advance('mine', 5); SELECT set_config('fencegate.fenced', '', true); SET TRANSACTION READ WRITE; SELECT fencegate.reset('" + fence + "', 1); COMMIT",
		"BEGIN READ ONLY; SELECT fencegate.advance('mine', 5); SAVEPOINT s; SELECT set_config('fencegate.fenced', '', true); SELECT fencegate.reset('" + fence + "', 0); COMMIT",
	} {
		_, err := c.PgConn().Exec(ctx, q).ReadAll()
		t.Logf("%s: %v", q, err)
		_, _ = c.Exec(ctx, "ROLLBACK")
		if got := redteam2Mark(t, admin, fence); got != 100 {
			t.Fatalf("%q: mark moved from 100 to %d", q, got)
		}
	}
}

// TestRedTeam2MigrateConcurrentDatabasesOneCluster: `fencegate migrate`
// (or serve with --postgres-migrate-dsn) run at the same time against two
// databases of one fresh cluster. The advisory lock is per database, but
// fencegate_owner and fencegate_runtime are cluster-wide: both must still
// succeed, with both schemas whole.
func TestRedTeam2MigrateConcurrentDatabasesOneCluster(t *testing.T) {
	// The roles are made once per cluster, so each try needs a new one;
	// the race is narrow, so a few tries, stopping at the first failure.
	for try := 0; try < 3 && !t.Failed(); try++ {
		redteam2MigrateRace(t, try)
	}
}

func redteam2MigrateRace(t *testing.T, try int) {
	t.Helper()
	ctx := t.Context()
	srv, err := throwaway.Start(ctx, throwaway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	const dbs = 8
	admin, err := pgx.Connect(ctx, srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	conns := make([]*pgx.Conn, dbs)
	for i := range conns {
		name := fmt.Sprintf("rt2_mig_%d", i)
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
			t.Fatal(err)
		}
		c, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", srv.Port(), name))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.WithoutCancel(ctx))
		conns[i] = c
	}
	errs := make([]error, dbs)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range conns {
		wg.Go(func() {
			<-start
			errs[i] = migrations.Apply(ctx, conns[i])
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err == nil {
			continue
		}
		v, _ := migrations.Version(ctx, conns[i])
		t.Errorf("try %d, database %d: Apply at the same time as %d other databases of the cluster: %v (schema left at version %d of %d)", try, i, dbs-1, err, v, migrations.Latest())
		// Running it again converges (the failed migration rolled back).
		if err := migrations.Apply(ctx, conns[i]); err != nil {
			t.Errorf("try %d, database %d: Apply again: %v", try, i, err)
		}
	}
}

// TestRedTeam2PlantedAdvanceOverload: a role that may CREATE in schema
// fencegate (an admin's mistake; fencegate grant refuses such a writer
// role) plants fencegate.advance(text, text). PostgreSQL prefers it for a
// call with untyped parameters, so the gateway's check must name its
// parameters' types, or every stale write is accepted. The write goes
// through the gateway's own backend (proxy/postgres), logged in as a
// member of fencegate_runtime.
func TestRedTeam2PlantedAdvanceOverload(t *testing.T) {
	ctx := t.Context()
	admin, dsn, login, _, fence := redteam2Roles(t)
	rogue := login + "_rogue"
	for _, sql := range []string{
		"CREATE ROLE " + rogue + " NOLOGIN",
		"GRANT CREATE ON SCHEMA fencegate TO " + rogue,
	} {
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	err := pgx.BeginFunc(ctx, admin, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+rogue); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "CREATE FUNCTION fencegate.advance(fence_name text, fence_token text) RETURNS bigint LANGUAGE sql AS 'SELECT 100::bigint'")
		return err
	})
	if err != nil {
		t.Fatalf("planting fencegate.advance(text, text) as %s: %v", rogue, err)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(login)
	be, err := postgres.Open(ctx, u.String(), postgres.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	// The mark is 100: token 5 is stale.
	_, err = be.Exec(ctx, fence, 5, []postgres.Statement{{SQL: "SELECT 1"}})
	if r, ok := tokens.AsRefusal(err); !ok || r.Reason != tokens.ReasonStaleToken {
		t.Errorf("stale token 5 on fence %s (mark 100) through the gateway after a planted overload: got %v, want STALE_TOKEN", fence, err)
	}
}
