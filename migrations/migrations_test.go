package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/tern/v2/migrate"
	"go.uber.org/goleak"

	"github.com/fencegate/fencegate/migrations"
	"github.com/fencegate/fencegate/proxy/postgres/throwaway"
)

var server *throwaway.Server

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	srv, err := throwaway.Start(ctx, throwaway.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	server = srv
	code := m.Run()
	if err := srv.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if err := goleak.Find(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	return code
}

var dbSeq atomic.Int64

// freshDB creates an empty database and returns its DSN.
func freshDB(t *testing.T) string {
	t.Helper()
	ctx := t.Context()
	name := fmt.Sprintf("migrations_%d", dbSeq.Add(1))
	conn := connect(t, server.DSN())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", server.Port(), name)
}

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.WithoutCancel(t.Context())) })
	return conn
}

func TestApplyConcurrentOnFreshDatabase(t *testing.T) {
	dsn := freshDB(t)
	const replicas = 4
	conns := make([]*pgx.Conn, replicas)
	for i := range conns {
		conns[i] = connect(t, dsn)
	}
	var wg sync.WaitGroup
	errs := make([]error, replicas)
	start := make(chan struct{})
	for i, c := range conns {
		wg.Go(func() {
			<-start
			errs[i] = migrations.Apply(t.Context(), c)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("replica %d: Apply: got %v, want nil", i, err)
		}
	}
	got, err := migrations.Version(t.Context(), conns[0])
	if err != nil {
		t.Fatal(err)
	}
	if want := migrations.Latest(); got != want {
		t.Errorf("version: got %d, want %d", got, want)
	}
	var rows int
	if err := conns[0].QueryRow(t.Context(), "SELECT count(*) FROM fencegate.schema_version").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 1 {
		t.Errorf("schema_version rows: got %d, want 1", rows)
	}
}

func TestApplyIdempotent(t *testing.T) {
	conn := connect(t, freshDB(t))
	for i := range 3 {
		if err := migrations.Apply(t.Context(), conn); err != nil {
			t.Fatalf("Apply #%d: got %v, want nil", i+1, err)
		}
	}
	// The advisory lock is released: another session can take it at once.
	other := connect(t, server.DSN())
	var ok bool
	if err := other.QueryRow(t.Context(), "SELECT pg_try_advisory_lock($1)", int64(0x66656e6365676174)).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Errorf("advisory lock after Apply: got held, want released")
	}
	if _, err := other.Exec(t.Context(), "SELECT pg_advisory_unlock_all()"); err != nil {
		t.Fatal(err)
	}
}

func TestApplyLeavesNewerSchemaAlone(t *testing.T) {
	conn := connect(t, freshDB(t))
	if err := migrations.Apply(t.Context(), conn); err != nil {
		t.Fatal(err)
	}
	newer := migrations.Latest() + 1
	if _, err := conn.Exec(t.Context(), "UPDATE fencegate.schema_version SET version = $1", newer); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Apply(t.Context(), conn); err != nil {
		t.Fatalf("Apply on newer schema: got %v, want nil", err)
	}
	got, err := migrations.Version(t.Context(), conn)
	if err != nil {
		t.Fatal(err)
	}
	if got != newer {
		t.Errorf("version: got %d, want %d", got, newer)
	}
}

func TestVersionOfEmptyDatabase(t *testing.T) {
	conn := connect(t, freshDB(t))
	got, err := migrations.Version(t.Context(), conn)
	if err != nil || got != 0 {
		t.Errorf("Version: got %d, %v, want 0, nil", got, err)
	}
}

func TestAdvance(t *testing.T) {
	conn := connect(t, freshDB(t))
	if err := migrations.Apply(t.Context(), conn); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name      string
		token     int64
		wantHW    int64 // the returned mark, or the one in DETAIL
		wantState string
	}{
		{"first token creates the fence", 5, 5, ""},
		{"higher token raises", 9, 9, ""},
		{"equal token is accepted", 9, 9, ""},
		{"lower token is stale", 8, 9, migrations.StaleSQLState},
		{"zero token is invalid", 0, 0, "22023"},
		{"negative token is invalid", -1, 0, "22023"},
		{"still at the mark", 9, 9, ""},
	}
	for _, st := range steps {
		var hw int64
		err := conn.QueryRow(t.Context(), "SELECT fencegate.advance($1, $2)", "f", st.token).Scan(&hw)
		var pgErr *pgconn.PgError
		switch {
		case st.wantState == "" && err != nil:
			t.Errorf("%s: got %v, want nil", st.name, err)
		case st.wantState == "" && hw != st.wantHW:
			t.Errorf("%s: high-water got %d, want %d", st.name, hw, st.wantHW)
		case st.wantState != "" && !errors.As(err, &pgErr):
			t.Errorf("%s: got %v, want SQLSTATE %s", st.name, err, st.wantState)
		case st.wantState != "" && pgErr.Code != st.wantState:
			t.Errorf("%s: SQLSTATE got %s, want %s", st.name, pgErr.Code, st.wantState)
		case st.wantState == migrations.StaleSQLState && pgErr.Detail != fmt.Sprintf("high_water=%d", st.wantHW):
			t.Errorf("%s: DETAIL got %q, want %q", st.name, pgErr.Detail, fmt.Sprintf("high_water=%d", st.wantHW))
		}
	}
	var null *int64
	if err := conn.QueryRow(t.Context(), "SELECT fencegate.advance(NULL, 3)").Scan(&null); err == nil {
		t.Errorf("advance(NULL, 3): got %v, want an error", null)
	}
}

// TestAdvanceLocking pins down what advance locks, in open transactions:
// writers of the current term do not wait for each other, a writer of a new
// term waits for every one of them, and they then find themselves stale.
func TestAdvanceLocking(t *testing.T) {
	dsn := freshDB(t)
	setup := connect(t, dsn)
	if err := migrations.Apply(t.Context(), setup); err != nil {
		t.Fatal(err)
	}
	if _, err := setup.Exec(t.Context(), "SELECT fencegate.advance('f', 9)"); err != nil {
		t.Fatal(err)
	}
	// begin opens a transaction that has advanced f to token and holds
	// what advance locked, with a short lock_timeout so a wait shows as
	// SQLSTATE 55P03 instead of a hang.
	begin := func(token int64) (pgx.Tx, error) {
		t.Helper()
		tx, err := connect(t, dsn).Begin(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(t.Context())) })
		if _, err := tx.Exec(t.Context(), "SET LOCAL lock_timeout = '300ms'"); err != nil {
			t.Fatal(err)
		}
		_, err = tx.Exec(t.Context(), "SELECT fencegate.advance('f', $1)", token)
		return tx, err
	}
	lockTimeout := func(err error) bool {
		var pgErr *pgconn.PgError
		return errors.As(err, &pgErr) && pgErr.Code == "55P03"
	}

	same1, err := begin(9)
	if err != nil {
		t.Fatalf("first writer of term 9: got %v, want nil", err)
	}
	same2, err := begin(9)
	if err != nil {
		t.Fatalf("second writer of term 9, while the first is open: got %v, want nil (no wait)", err)
	}
	if _, err := begin(10); !lockTimeout(err) {
		t.Fatalf("writer of term 10 while term 9's are open: got %v, want a lock wait (55P03)", err)
	}
	if err := same1.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := begin(10); !lockTimeout(err) {
		t.Fatalf("writer of term 10 while one of term 9's is open: got %v, want a lock wait (55P03)", err)
	}
	if err := same2.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	newer, err := begin(10)
	if err != nil {
		t.Fatalf("writer of term 10 once term 9's committed: got %v, want nil", err)
	}
	if _, err := begin(9); !lockTimeout(err) {
		t.Fatalf("writer of term 9 while term 10's is open: got %v, want a lock wait (55P03)", err)
	}
	if err := newer.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	var pgErr *pgconn.PgError
	if _, err := begin(9); !errors.As(err, &pgErr) || pgErr.Code != migrations.StaleSQLState {
		t.Fatalf("writer of term 9 after term 10 committed: got %v, want SQLSTATE %s", err, migrations.StaleSQLState)
	}
}

// TestAdvanceWaitsThenRechecks: a writer whose token is the mark when it
// starts, while another transaction holds the fence row to move the mark,
// waits for that transaction and is judged against the mark it committed:
// stale behind a raise, accepted (raising the mark again) behind a reset.
func TestAdvanceWaitsThenRechecks(t *testing.T) {
	dsn := freshDB(t)
	setup := connect(t, dsn)
	if err := migrations.Apply(t.Context(), setup); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"raised", "reset"} {
		if _, err := setup.Exec(t.Context(), "SELECT fencegate.advance($1, 9)", f); err != nil {
			t.Fatal(err)
		}
	}
	// hold runs stmt in a transaction left open until the returned commit.
	hold := func(stmt string, args ...any) (commit func()) {
		tx, err := connect(t, dsn).Begin(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(t.Context(), stmt, args...); err != nil {
			t.Fatal(err)
		}
		return func() {
			if err := tx.Commit(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
	}
	// writeBehind starts a writer of token 9 on fence, waits until it is
	// blocked on a lock, runs commit and returns the writer's outcome.
	writeBehind := func(fence string, commit func()) (int64, error) {
		writer := connect(t, dsn)
		var hw int64
		done := make(chan error, 1)
		go func() {
			done <- writer.QueryRow(t.Context(), "SELECT fencegate.advance($1, 9)", fence).Scan(&hw)
		}()
		waitForLockWait(t, setup)
		commit()
		return hw, <-done
	}

	commit := hold("SELECT fencegate.advance('raised', 10)")
	_, err := writeBehind("raised", commit)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != migrations.StaleSQLState || pgErr.Detail != "high_water=10" {
		t.Errorf("token 9 behind a raise to 10: got %v, want SQLSTATE %s with high_water=10", err, migrations.StaleSQLState)
	}

	commit = hold("SELECT fencegate.reset('reset', 5)")
	hw, err := writeBehind("reset", commit)
	if err != nil || hw != 9 {
		t.Errorf("token 9 behind a reset to 5: got %d, %v; want 9, nil", hw, err)
	}
	var mark int64
	if err := setup.QueryRow(t.Context(), "SELECT token FROM fencegate.fences WHERE name = 'reset'").Scan(&mark); err != nil || mark != 9 {
		t.Errorf("mark after the reset and the write: got %d, %v; want 9", mark, err)
	}
}

// waitForLockWait returns once some session of the cluster waits for a
// lock.
func waitForLockWait(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	for range 500 {
		var waiting bool
		if err := conn.QueryRow(t.Context(), "SELECT EXISTS (SELECT FROM pg_locks WHERE NOT granted)").Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no session waited for a lock within 5s")
}

// migrateTo brings a fresh database to schema version v, as an older
// fencegate would have left it.
func migrateTo(t *testing.T, conn *pgx.Conn, v int32) {
	t.Helper()
	if _, err := conn.Exec(t.Context(), "CREATE SCHEMA IF NOT EXISTS fencegate"); err != nil {
		t.Fatal(err)
	}
	m, err := migrate.NewMigrator(t.Context(), conn, migrations.VersionTable)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.LoadMigrations(migrations.FS()); err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateTo(t.Context(), v); err != nil {
		t.Fatal(err)
	}
}

// evilOperators gives the session an = for bigints that is always true,
// found before pg_catalog's through its search path.
const evilOperators = `
CREATE SCHEMA evil;
CREATE FUNCTION evil.yes(bigint, bigint) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE OPERATOR evil.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = evil.yes);
SELECT set_config('search_path', 'evil, pg_catalog, public', false);`

// TestAdvanceIgnoresCallerOperators: a session whose search path finds its
// own = first cannot make advance accept a stale token. Version 2's
// advance (invoker's search path) is shown to fall for it, so the test
// would catch the defence going away.
func TestAdvanceIgnoresCallerOperators(t *testing.T) {
	for _, tc := range []struct {
		version   int32
		wantStale bool
	}{
		{2, false}, // the attack works on the schema before 003
		{migrations.Latest(), true},
	} {
		t.Run(fmt.Sprintf("version %d", tc.version), func(t *testing.T) {
			conn := connect(t, freshDB(t))
			migrateTo(t, conn, tc.version)
			if _, err := conn.Exec(t.Context(), "SELECT fencegate.advance('f', 9)"); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Exec(t.Context(), evilOperators); err != nil {
				t.Fatal(err)
			}
			_, err := conn.Exec(t.Context(), "SELECT fencegate.advance('f', 3)")
			var pgErr *pgconn.PgError
			gotStale := errors.As(err, &pgErr) && pgErr.Code == migrations.StaleSQLState
			if gotStale != tc.wantStale {
				t.Errorf("advance('f', 3) below mark 9 with evil.= first in search_path: got %v, want stale %v", err, tc.wantStale)
			}
			var mark int64
			if err := conn.QueryRow(t.Context(), "SELECT token FROM fencegate.fences WHERE name OPERATOR(pg_catalog.=) 'f'").Scan(&mark); err != nil {
				t.Fatal(err)
			}
			if mark != 9 {
				t.Errorf("mark: got %d, want 9", mark)
			}
		})
	}
}

// runtimeConn returns a connection as a new login role that is a member of
// RuntimeRole, as fencegate serves, on a database migrated to the latest
// schema. The role may create objects in schema public, as an app's role
// often can.
func runtimeConn(t *testing.T) (admin, rt *pgx.Conn) {
	t.Helper()
	dsn := freshDB(t)
	admin = connect(t, dsn)
	if err := migrations.Apply(t.Context(), admin); err != nil {
		t.Fatal(err)
	}
	role := fmt.Sprintf("rt_%d", dbSeq.Add(1))
	for _, sql := range []string{
		"CREATE ROLE " + role + " LOGIN",
		"GRANT CREATE ON SCHEMA public TO " + role,
	} {
		if _, err := admin.Exec(t.Context(), sql); err != nil {
			t.Fatal(err)
		}
	}
	if err := migrations.GrantRuntime(t.Context(), admin, role); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.User = role
	rt, err = pgx.ConnectConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.WithoutCancel(t.Context())) })
	return admin, rt
}

// TestRuntimeRoleCannotMoveMarks: the role fencegate serves as can advance
// a fence once per transaction and read the fences, and cannot write them
// any other way, nor take fencegate's objects over.
func TestRuntimeRoleCannotMoveMarks(t *testing.T) {
	admin, rt := runtimeConn(t)
	ctx := t.Context()
	if _, err := rt.Exec(ctx, "SELECT fencegate.advance('other', 5)"); err != nil {
		t.Fatalf("runtime role advancing a fence: %v", err)
	}
	// A leader at its mark: its check takes the one-read path (006).
	if _, err := rt.Exec(ctx, "SELECT fencegate.advance('held', 7)"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := rt.QueryRow(ctx, "SELECT count(*) FROM fencegate.fences").Scan(&n); err != nil {
		t.Fatalf("runtime role reading the fences: %v", err)
	}

	for _, attack := range []struct{ name, sql string }{
		{"upsert", "INSERT INTO fencegate.fences(name, token) VALUES ('other', 9223372036854775807) ON CONFLICT (name) DO UPDATE SET token = excluded.token"},
		{"update", "UPDATE fencegate.fences SET token = 9223372036854775807"},
		{"delete", "DELETE FROM fencegate.fences"},
		{"truncate", "TRUNCATE fencegate.fences"},
		{"replace advance", "CREATE OR REPLACE FUNCTION fencegate.advance(text, bigint) RETURNS bigint LANGUAGE sql AS 'SELECT 1::bigint'"},
		{"shadow advance", "CREATE FUNCTION public.advance(text, bigint) RETURNS bigint LANGUAGE sql AS 'SELECT 1::bigint'; SELECT fencegate.advance('other', 1)"},
		{"alter owner", "ALTER TABLE fencegate.fences OWNER TO CURRENT_USER"},
		{"become owner", "SET ROLE fencegate_owner"},
		{"grant self", "GRANT fencegate_owner TO CURRENT_USER"},
		{"second advance", "SELECT fencegate.advance('mine', 7), fencegate.advance('other', 9223372036854775807)"},
		{"second advance later in the transaction", "BEGIN; SELECT fencegate.advance('mine', 7); SELECT fencegate.advance('other', 9223372036854775807); COMMIT"},
		{"second advance after one at the mark", "SELECT fencegate.advance('held', 7), fencegate.advance('other', 9223372036854775807)"},
		{"second advance later than one at the mark", "BEGIN; SELECT fencegate.advance('held', 7); SELECT fencegate.advance('other', 9223372036854775807); COMMIT"},
		// The mark of version 3 cleared first (RESET ALL, or set_config in
		// dynamic SQL that no check of the text sees): from version 7 the
		// transaction's id refuses the second call.
		{"second advance after RESET ALL", "BEGIN; SELECT fencegate.advance('mine', 7); RESET ALL; SELECT fencegate.advance('other', 9223372036854775807); COMMIT"},
		{"second advance after clearing the mark", "BEGIN; SELECT fencegate.advance('held', 7); SELECT set_config('fencegate.fenced', '', true); SELECT fencegate.advance('other', 9223372036854775807); COMMIT"},
		{"second advance in dynamic SQL", "SELECT fencegate.advance('held', 7); DO $$ BEGIN EXECUTE 'RESET ALL'; EXECUTE 'SELECT fencegate.advance(''other'', 9223372036854775807)'; END $$"},
		{"advance_mark", "SELECT fencegate.advance_mark('other', 9223372036854775807)"},
	} {
		_, err := rt.Exec(ctx, attack.sql)
		if err == nil {
			t.Errorf("%s: got nil, want an error", attack.name)
		}
		_, _ = rt.Exec(ctx, "ROLLBACK")
	}
	var mark int64
	if err := admin.QueryRow(ctx, "SELECT token FROM fencegate.fences WHERE name = 'other'").Scan(&mark); err != nil {
		t.Fatal(err)
	}
	if mark != 5 {
		t.Errorf("mark of other after the attacks: got %d, want 5", mark)
	}
}

// TestAdvanceReadOnly: in a read-only transaction, where PostgreSQL locks
// no row, advance judges the token by the mark it reads (from version
// 7): a stale one is refused, one at or above the mark accepted, and no
// mark is raised or created.
func TestAdvanceReadOnly(t *testing.T) {
	conn := connect(t, freshDB(t))
	ctx := t.Context()
	if err := migrations.Apply(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SELECT fencegate.advance('f', 9)"); err != nil {
		t.Fatal(err)
	}
	readOnly := func(fence string, token int64) (int64, error) {
		tx, err := conn.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		var hw int64
		err = tx.QueryRow(ctx, "SELECT fencegate.advance($1, $2)", fence, token).Scan(&hw)
		return hw, err
	}
	for _, tc := range []struct {
		name  string
		fence string
		token int64
		hw    int64
		stale bool
	}{
		{"at the mark", "f", 9, 9, false},
		{"above the mark", "f", 12, 9, false},
		{"below the mark", "f", 8, 0, true},
		{"a new fence", "g", 3, 0, false},
	} {
		hw, err := readOnly(tc.fence, tc.token)
		var pgErr *pgconn.PgError
		switch {
		case tc.stale && (!errors.As(err, &pgErr) || pgErr.Code != migrations.StaleSQLState):
			t.Errorf("%s: got %v, want SQLSTATE %s", tc.name, err, migrations.StaleSQLState)
		case !tc.stale && err != nil:
			t.Errorf("%s: got %v, want accepted", tc.name, err)
		case !tc.stale && hw != tc.hw:
			t.Errorf("%s: returned %d, want the mark %d", tc.name, hw, tc.hw)
		}
	}
	var marks string
	if err := conn.QueryRow(ctx, "SELECT string_agg(name || '=' || token, ',' ORDER BY name) FROM fencegate.fences").Scan(&marks); err != nil {
		t.Fatal(err)
	}
	if marks != "f=9" {
		t.Errorf("marks after the read-only checks: got %s, want f=9 (none raised or made)", marks)
	}
}
