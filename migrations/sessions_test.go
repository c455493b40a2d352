package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestSessionBinding: advance_session (migration 008) checks the fence
// fencegate's pool bound the session to, and nothing else: a session that
// is not bound, or asked for another fence, is refused with FG006; only
// fencegate_runtime may bind, and (migration 014) only a live session of
// this database under its own login; a bind drops the bindings of
// processes that have exited; unbind ends one.
func TestSessionBinding(t *testing.T) {
	ctx := t.Context()
	admin, pool := runtimeConn(t) // pool: fencegate's own login
	login := fmt.Sprintf("listener_%d", dbSeq.Add(1))
	if _, err := admin.Exec(ctx, "CREATE ROLE "+login+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	cfg := pool.Config().Copy()
	cfg.User = login
	client, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(context.WithoutCancel(ctx))
	pid := client.PgConn().PID()

	check := func(fence string, token int64) error {
		var mark int64
		return client.QueryRow(ctx, "SELECT fencegate.advance_session($1, $2)", fence, token).Scan(&mark)
	}
	wantRefused := func(what string, err error, code, msg string) {
		t.Helper()
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != code || !strings.Contains(pe.Message, msg) {
			t.Fatalf("%s: got %v, want SQLSTATE %s: %s", what, err, code, msg)
		}
	}
	bind := func(conn *pgx.Conn, pid uint32, login, fence string) error {
		_, err := conn.Exec(ctx, "SELECT fencegate.bind_session($1, $2, $3, NULL, NULL)", int32(pid), login, fence)
		return err
	}

	wantRefused("not bound", check("a", 5), "FG006", "not bound to a fence")
	// The listener's login may not bind itself.
	wantRefused("bind by the client", bind(client, pid, login, "b"), "42501", "permission denied for function bind_session")
	// Bound under another login: refused, and nothing is bound.
	wantRefused("bind under another login", bind(pool, pid, "someone_else", "a"), "22023", "not a session of this database logged in as someone_else")
	wantRefused("bound under another login", check("a", 5), "FG006", "not bound to a fence")

	// A binding of a process that has exited goes at the next bind.
	gone, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	gonePID := int32(gone.PgConn().PID())
	if err := bind(pool, uint32(gonePID), login, "gone"); err != nil {
		t.Fatal(err)
	}
	gone.Close(ctx)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var n int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", gonePID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a closed session's backend is still there")
		}
	}
	if err := bind(pool, pid, login, "a"); err != nil {
		t.Fatal(err)
	}
	var stale bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT FROM fencegate.sessions WHERE pid = $1)", gonePID).Scan(&stale); err != nil {
		t.Fatal(err)
	}
	if stale {
		t.Fatal("the binding of an exited process survived a bind")
	}

	if err := check("a", 5); err != nil {
		t.Fatalf("the bound fence: %v", err)
	}
	wantRefused("another fence", check("b", 5), "FG006", "bound to fence 'a', not 'b'")
	// As advance: only as the first statement of a transaction.
	tx, err := client.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT fencegate.advance_session('a', 5)"); err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, "SELECT fencegate.advance_session('a', 6)")
	wantRefused("second check", err, "FG006", "only as the first statement")
	_ = tx.Rollback(ctx)
	wantRefused("stale token", check("a", 4), "FG001", "high-water mark is 5")

	if _, err := pool.Exec(ctx, "SELECT fencegate.unbind_session($1)", int32(pid)); err != nil {
		t.Fatal(err)
	}
	wantRefused("unbound", check("a", 5), "FG006", "not bound to a fence")
	// The client may read nothing of the bindings, nor write them.
	_, err = client.Exec(ctx, "INSERT INTO fencegate.sessions (pid, login, fence) VALUES ($1, $2, 'b')", int32(pid), login)
	wantRefused("insert a binding", err, "42501", "permission denied for table sessions")
}

// TestEndSession: end_session (migration 009) terminates the backend of a
// session bind_session bound, still logged in as the login it was bound
// with, and ends its binding; it terminates no session that is not bound,
// or bound under another login; only fencegate_runtime may run it.
func TestEndSession(t *testing.T) {
	ctx := t.Context()
	admin, pool := runtimeConn(t) // pool: fencegate's own login
	login := fmt.Sprintf("listener_%d", dbSeq.Add(1))
	if _, err := admin.Exec(ctx, "CREATE ROLE "+login+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	connect := func() *pgx.Conn {
		cfg := pool.Config().Copy()
		cfg.User = login
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.WithoutCancel(ctx)) })
		return c
	}
	bind := func(pid uint32, login string) {
		t.Helper()
		if _, err := pool.Exec(ctx, "SELECT fencegate.bind_session($1, $2, 'f', NULL, NULL)", int32(pid), login); err != nil {
			t.Fatal(err)
		}
	}
	end := func(conn *pgx.Conn, pid uint32) (bool, error) {
		var ended bool
		err := conn.QueryRow(ctx, "SELECT fencegate.end_session($1)", int32(pid)).Scan(&ended)
		return ended, err
	}
	alive := func(pid uint32) bool {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			var n int
			if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", int32(pid)).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				return false
			}
		}
		return true
	}

	// Not bound: nothing is terminated.
	other := connect()
	if ended, err := end(pool, other.PgConn().PID()); err != nil || ended {
		t.Fatalf("a session never bound: ended %v, %v; want false", ended, err)
	}
	// Bound under another login (bind_session refuses that from version
	// 14; a binding of an earlier version, written here as the
	// superuser): the binding goes, the session stays.
	if _, err := admin.Exec(ctx, "INSERT INTO fencegate.sessions (pid, login, fence) VALUES ($1, 'someone_else', 'f')", int32(other.PgConn().PID())); err != nil {
		t.Fatal(err)
	}
	if ended, err := end(pool, other.PgConn().PID()); err != nil || ended {
		t.Fatalf("a session bound under another login: ended %v, %v; want false", ended, err)
	}
	if err := other.Ping(ctx); err != nil {
		t.Fatalf("the session bound under another login after end_session: %v", err)
	}

	// The client may not end sessions itself.
	client := connect()
	pid := client.PgConn().PID()
	bind(pid, login)
	var pe *pgconn.PgError
	if _, err := end(other, pid); !errors.As(err, &pe) || pe.Code != "42501" {
		t.Fatalf("end_session by a client: got %v, want 42501", err)
	}

	ended, err := end(pool, pid)
	if err != nil || !ended {
		t.Fatalf("end_session of a bound session: ended %v, %v; want true", ended, err)
	}
	if alive(pid) {
		t.Fatal("the bound session's backend is still there")
	}
	var bound bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT FROM fencegate.sessions WHERE pid = $1)", int32(pid)).Scan(&bound); err != nil {
		t.Fatal(err)
	}
	if bound {
		t.Fatal("the binding outlived end_session")
	}
}

// TestBindSessionOnlyLiveListenerLogins: bind_session (migration 014)
// binds only a live backend of this database under the login it names:
// fencegate's own login may not bind a process id that is no session, a
// session under another login than its own, or another database's.
func TestBindSessionOnlyLiveListenerLogins(t *testing.T) {
	ctx := t.Context()
	admin, pool := runtimeConn(t) // pool: fencegate's own login
	login := fmt.Sprintf("listener_%d", dbSeq.Add(1))
	if _, err := admin.Exec(ctx, "CREATE ROLE "+login+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	as := func(dsn, user string) *pgx.Conn {
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		cfg.User = user
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.WithoutCancel(ctx)) })
		return c
	}
	bind := func(pid uint32, login string) error {
		_, err := pool.Exec(ctx, "SELECT fencegate.bind_session($1, $2, 'f', NULL, NULL)", int32(pid), login)
		return err
	}
	refused := func(what string, err error) {
		t.Helper()
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "22023" || !strings.Contains(pe.Message, "is not a session of this database logged in as") {
			t.Errorf("%s: got %v, want SQLSTATE 22023", what, err)
		}
	}
	count := func() int {
		t.Helper()
		var n int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM fencegate.sessions").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	here := pool.Config().ConnString()
	direct := as(here, login)
	// A session of the login in another database of the cluster.
	elsewhere := as(freshDB(t), login)
	refused("another database's backend", bind(elsewhere.PgConn().PID(), login))
	// Under another login than its own.
	refused("under another login", bind(direct.PgConn().PID(), "postgres"))
	// A process that is no backend.
	refused("no backend", bind(1, login))
	if n := count(); n != 0 {
		t.Fatalf("%d bindings written by refused binds", n)
	}

	// Its own live session of this database: bound, and its check passes.
	if err := bind(direct.PgConn().PID(), login); err != nil {
		t.Fatal(err)
	}
	var mark int64
	if err := direct.QueryRow(ctx, "SELECT fencegate.advance_session('f', 3)").Scan(&mark); err != nil || mark != 3 {
		t.Fatalf("the bound session's check: mark %d, %v", mark, err)
	}
}
