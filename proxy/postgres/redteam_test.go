package postgres

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/proxy/postgres/sqlcheck"
	"github.com/fencegate/fencegate/tokens"
)

// Red-team tests of the SQL write path: each asserts the SAFE outcome, so a
// failing TestRedTeam* is a hole.

// TestRedTeamAttributeNotationPrefixRules: PostgreSQL reads (expr).f as
// f(expr) for any one-argument function f, not only on composite values.
// The SQL check refuses attribute notation only for the functions it
// refuses by exact name, so every function it refuses by prefix or suffix
// (dblink*, *_exec, lo_*, pg_stat_reset*, pg_create_*, pg_ls_*,
// pg_replication_*, crosstab*) that takes one argument is reachable.
func TestRedTeamAttributeNotationPrefixRules(t *testing.T) {
	t.Parallel()
	c, err := sqlcheck.New(sqlcheck.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		`SELECT ('dbname=postgres'::text).dblink_connect`,
		`SELECT ('INSERT INTO t VALUES (1)'::text).dblink_exec`,
		`SELECT ('DELETE FROM t'::text).my_exec`,
		`SELECT (4242::oid).lo_create`,
		`SELECT (4242::oid).lo_unlink`,
		`SELECT ('s'::name).pg_create_physical_replication_slot`,
		`SELECT ('x'::text).pg_replication_origin_create`,
		`SELECT ('SELECT 1'::text).crosstab2`,
	} {
		if _, err := c.Check(sql); err == nil {
			t.Errorf("Check(%q): accepted; PostgreSQL calls the refused function with the value as its argument", sql)
		}
	}

	// Through the pipeline, as fencegate's runtime role: the large object
	// is created although lo_* is refused.
	db := admin(t)
	var oid uint32
	if err := db.QueryRow(t.Context(), "SELECT 900000 + (random() * 90000)::int").Scan(&oid); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = db.Exec(context.WithoutCancel(t.Context()), "SELECT lo_unlink(oid) FROM pg_largeobject_metadata WHERE oid = $1", oid)
	})
	_, err = backend.Exec(t.Context(), unique("rt_lo"), 1, []Statement{{SQL: fmt.Sprintf("SELECT (%d::oid).lo_create", oid)}})
	var n int
	if err := db.QueryRow(t.Context(), "SELECT count(*) FROM pg_largeobject_metadata WHERE oid = $1", oid).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if err == nil || n != 0 {
		t.Errorf("SELECT (%d::oid).lo_create: got err=%v and %d large objects, want INVALID_REQUEST and none (lo_* is refused)", oid, err, n)
	}
}

// TestRedTeamDblinkAttributeNotationEscapesTransaction: with dblink
// installed (the check refuses dblink* precisely because it may be), a
// write opens a dblink connection and writes through it by attribute
// notation. The insert commits on the other connection although the
// write fails and rolls back, and the dblink connection stays open on the
// pooled session. Demonstrated as a superuser login, because the
// throwaway server's trust authentication makes dblink refuse
// non-superusers; with password authentication any login that knows a
// password can do the same.
func TestRedTeamDblinkAttributeNotationEscapesTransaction(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := admin(t)
	dbname := unique("rt_dblink")
	mustExec(t, db, "CREATE DATABASE "+dbname)
	t.Cleanup(func() {
		_, _ = db.Exec(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+dbname+" WITH (FORCE)")
	})
	dsn := strings.Replace(server.DSN(), "/postgres?", "/"+dbname+"?", 1)
	if err := MigrateDSN(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	own, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close(context.WithoutCancel(ctx))
	mustExec(t, own, "CREATE EXTENSION dblink")
	mustExec(t, own, "CREATE TABLE rt_escape(n int)")

	b, err := Open(ctx, dsn, Config{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	connstr := fmt.Sprintf("host=127.0.0.1 port=%d dbname=%s user=postgres", server.Port(), dbname)
	fence := unique("rt_dblink_fence")
	_, err = b.Exec(ctx, fence, 1, []Statement{
		{SQL: "SELECT ($1::text).dblink_connect", Params: []any{connstr}},
		{SQL: "SELECT ('INSERT INTO rt_escape VALUES (1)'::text).dblink_exec"},
		{SQL: "SELECT 1/0"}, // the write fails: nothing of it may stay
	})
	if err == nil {
		t.Fatal("write with 1/0 accepted")
	}
	var n int
	if err := own.QueryRow(ctx, "SELECT count(*) FROM rt_escape").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("rows in rt_escape after a refused write (%v): got %d, want 0 (dblink_exec by attribute notation committed outside the write's transaction)", err, n)
	}
	// The next write on the pooled connection finds the dblink session.
	if _, err := b.Exec(ctx, fence, 1, []Statement{{SQL: "SELECT ('INSERT INTO rt_escape VALUES (2)'::text).dblink_exec"}}); err == nil {
		t.Errorf("the dblink connection opened by an earlier, refused write is still open on the pooled session")
	}
}

// TestRedTeamDDLViewOverPgSettingsLeaksSession: with AllowSQL "ddl", a
// write creates a view over pg_settings (reading it is allowed) and a
// later write updates the view. PostgreSQL rewrites the UPDATE through
// pg_settings's rule into set_config(name, value, false): a session-level
// setting that outlives the write on the pooled connection. search_path
// and statement_timeout are not among the settings PostgreSQL 15 reports,
// so the connection is not closed, and the next caller's unqualified
// table names resolve in the attacker's schema.
func TestRedTeamDDLViewOverPgSettingsLeaksSession(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := admin(t)
	schema, victim := unique("rt_ddl"), unique("rt_victim")
	mustExec(t, db, "CREATE TABLE public."+victim+"(n int)")
	mustExec(t, db, "GRANT ALL ON public."+victim+" TO "+backend.User())
	// A deployment that allows DDL gives the login a schema to create in.
	mustExec(t, db, "CREATE SCHEMA "+schema)
	mustExec(t, db, "GRANT USAGE, CREATE ON SCHEMA "+schema+" TO "+backend.User())
	t.Cleanup(func() { _, _ = db.Exec(context.WithoutCancel(ctx), "DROP SCHEMA "+schema+" CASCADE") })

	b := openBackend(t, Config{MaxConns: 1, AllowSQL: []string{"ddl"}})
	settings := "SELECT current_setting('search_path'), current_setting('statement_timeout')"
	before, err := b.Exec(ctx, unique("rt_victim_fence"), 1, []Statement{{SQL: settings}})
	if err != nil {
		t.Fatal(err)
	}

	attacker := unique("rt_attacker_fence")
	// The view over pg_settings is refused (sqlcheck); the rest of the
	// attack goes on as if it had been made, to show what it would do.
	if _, err := b.Exec(ctx, attacker, 1, []Statement{
		{SQL: "CREATE VIEW " + schema + ".settings AS SELECT * FROM pg_settings"},
	}); err == nil {
		t.Errorf("attack, a view over pg_settings: accepted, want INVALID_REQUEST")
	} else if r, _ := tokens.AsRefusal(err); r == nil || r.Reason != tokens.ReasonInvalidRequest {
		t.Errorf("attack, a view over pg_settings: got %v, want INVALID_REQUEST", err)
	}
	if _, err := b.Exec(ctx, attacker, 1, []Statement{
		{SQL: "CREATE TABLE " + schema + "." + victim + "(n int)"},
	}); err != nil {
		t.Fatalf("attack, DDL write: %v", err)
	}
	_, attackErr := b.Exec(ctx, attacker, 1, []Statement{
		{SQL: "UPDATE " + schema + ".settings SET setting = $1 WHERE name = 'search_path'", Params: []any{schema}},
		{SQL: "UPDATE " + schema + ".settings SET setting = '0' WHERE name = 'statement_timeout'"},
	})

	// The next caller, another fence, on the same pooled connection.
	after, err := b.Exec(ctx, unique("rt_victim_fence"), 1, []Statement{
		{SQL: settings},
		{SQL: "INSERT INTO " + victim + " VALUES (1)"},
	})
	if err != nil {
		t.Fatalf("next write: %v", err)
	}
	if got, want := after[0].Rows[0], before[0].Rows[0]; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("next caller's session (search_path, statement_timeout): got %v, want %v (the attack %q: %v)", got, want, "UPDATE <view over pg_settings> SET setting = ...", attackErr)
	}
	if got := count(t, db, "public."+victim); got != 1 {
		t.Errorf("the next caller's INSERT INTO %s: %d rows in public.%s, want 1 (it went to %s.%s: %d rows)",
			victim, got, victim, schema, victim, count(t, db, schema+"."+victim))
	}
}

// redTeamChild names, in the environment, the test a child process runs.
const redTeamChild = "FENCEGATE_REDTEAM_CHILD"

// TestRedTeamStatementCacheEvictionCrash: a batch of coalesced writes
// with more than stmtCacheSize (512) distinct statements evicts, while it
// is being prepared, statements the same batch then encodes: lookup
// returns nil and exec dereferences it in the batch's goroutine, which
// takes the whole process down. Ten writes of 64 statements (the
// gateway's default MaxStatements) sent while the pool is busy are enough.
// Run in a child process, which the panic would kill.
func TestRedTeamStatementCacheEvictionCrash(t *testing.T) {
	if os.Getenv(redTeamChild) == t.Name() {
		redTeamEvictionChild(t)
		return
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	// The child's throwaway server lives under a directory of ours: a
	// panic leaves it behind.
	tmp, err := os.MkdirTemp("", "redteam-child-") //nolint:usetesting // removed below, once the child's server (another user's) is gone
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil { // for the server's own user
		t.Fatal(err)
	}
	defer func() {
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if pids, _ := filepath.Glob(filepath.Join(tmp, "*", "data", "postmaster.pid")); len(pids) == 0 {
				break
			}
		}
		_ = os.RemoveAll(tmp)
	}()
	cmd.Env = append(os.Environ(), redTeamChild+"="+t.Name(), "TMPDIR="+tmp)
	out, err := cmd.CombinedOutput()
	if strings.Contains(string(out), "panic:") || err != nil {
		i := strings.Index(string(out), "panic:")
		if i < 0 {
			i = 0
		}
		tail := string(out[i:])
		if len(tail) > 1500 {
			tail = tail[:1500]
		}
		t.Errorf("ten coalesced writes of 64 distinct statements: child process failed (%v):\n%s", err, tail)
	}
}

func redTeamEvictionChild(t *testing.T) {
	t.Helper()
	b := openBackend(t, Config{MaxConns: 1})
	busy := occupy(t, b, 1, 500*time.Millisecond)
	const writes, perWrite = 10, 64
	errs := make([]error, writes)
	var wg sync.WaitGroup
	for w := range writes {
		stmts := make([]Statement, perWrite)
		for i := range stmts {
			stmts[i] = Statement{SQL: fmt.Sprintf("SELECT %d AS rt", w*perWrite+i)}
		}
		wg.Go(func() { _, errs[w] = b.Exec(t.Context(), unique("rt_evict"), 1, stmts) })
	}
	wg.Wait()
	busy.Wait()
	for w, err := range errs {
		if err != nil {
			var r *tokens.RefusalError
			if !errors.As(err, &r) {
				t.Errorf("write %d: %v", w, err)
			}
		}
	}
}

// TestRedTeamRefused: attempts that the pipeline refuses as it should,
// kept so a regression shows. Each is refused before anything is sent,
// and the next write on the same connection sees the login's defaults.
func TestRedTeamRefused(t *testing.T) {
	t.Parallel()
	b := openBackend(t, Config{MaxConns: 1})
	probe := []Statement{{SQL: "SELECT current_setting('search_path'), current_setting('statement_timeout'), current_user::text"}}
	want, err := b.Exec(t.Context(), unique("rt_refused"), 1, probe)
	if err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		"SELECT * FROM ROWS FROM (set_config('search_path', 'x', false)) s",
		"SELECT (5::bigint).pg_advisory_lock",
		"SELECT x.pg_advisory_lock FROM (SELECT 5::bigint) x",
		`UPDATE ONLY "pg_settings" SET setting = '0' WHERE name = 'statement_timeout'`,
		"MERGE INTO pg_settings s USING (SELECT 1) x ON true WHEN MATCHED THEN UPDATE SET setting = '0'",
		"INSERT INTO pg_catalog.pg_settings (name, setting) VALUES ('search_path', 'x') ON CONFLICT DO NOTHING",
		"COMMIT AND CHAIN",
		"SELECT 1; SET search_path = x",
		"SELECT pg_catalog.pg_notify('c', 'x')",
		"SELECT lo_create(4242)",
		"SELECT dblink_exec('INSERT INTO t VALUES (1)')",
		"SET LOCAL statement_timeout = 0",
		"SELECT set_config('role', 'none', true)",
		"RESET SESSION AUTHORIZATION",
		"WITH x AS (SELECT set_config('search_path', 'x', false)) SELECT 1",
		"SELECT pg_advisory_lock(hashtext('term_x'))",
		"DECLARE c CURSOR WITH HOLD FOR SELECT 1",
	} {
		_, err := b.Exec(t.Context(), unique("rt_refused"), 1, []Statement{{SQL: sql}})
		if r, ok := tokens.AsRefusal(err); !ok || r.Reason != tokens.ReasonInvalidRequest {
			t.Errorf("%q: got %v, want INVALID_REQUEST", sql, err)
		}
	}
	got, err := b.Exec(t.Context(), unique("rt_refused"), 1, probe)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got[0].Rows) != fmt.Sprint(want[0].Rows) {
		t.Errorf("session after the refusals: got %v, want %v", got[0].Rows, want[0].Rows)
	}
}
