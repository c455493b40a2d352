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
// is not bound, bound under another login, or asked for another fence is
// refused with FG006; only fencegate_runtime may bind; a bind drops the
// bindings of processes that have exited; unbind ends one.
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
	// Bound under another login: the binding is not this session's.
	if err := bind(pool, pid, "someone_else", "a"); err != nil {
		t.Fatal(err)
	}
	wantRefused("bound under another login", check("a", 5), "FG006", "not bound to a fence")

	// A binding of a process that has exited (pid 1 is never a backend's)
	// goes at the next bind.
	if err := bind(pool, 1, login, "gone"); err != nil {
		t.Fatal(err)
	}
	if err := bind(pool, pid, login, "a"); err != nil {
		t.Fatal(err)
	}
	var stale bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT FROM fencegate.sessions WHERE pid = 1)").Scan(&stale); err != nil {
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
	// Bound under another login: the binding goes, the session stays.
	bind(other.PgConn().PID(), "someone_else")
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
