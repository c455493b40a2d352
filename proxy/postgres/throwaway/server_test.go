package throwaway_test

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/fencegate/fencegate/proxy/postgres/throwaway"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func query(t *testing.T, dsn, sql string) (int, error) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(t.Context()))
	var n int
	err = conn.QueryRow(t.Context(), sql).Scan(&n)
	return n, err
}

// TestLifecycle covers start, data surviving a restart and a crash, and
// that stopping leaves no process and no directory behind. One server,
// because starting one costs about a second.
func TestLifecycle(t *testing.T) {
	var logged int
	srv, err := throwaway.Start(t.Context(), throwaway.Options{Logf: func(string, ...any) { logged++ }})
	if err != nil {
		t.Fatal(err)
	}
	dsn, dir, pid := srv.DSN(), srv.DataDir(), srv.PID()
	if pid == 0 || logged == 0 {
		t.Errorf("after Start: got pid %d, %d log lines, want both non-zero", pid, logged)
	}
	if _, err := query(t, dsn, "SELECT 1 FROM (SELECT 1) x, LATERAL (SELECT 1) y WHERE EXISTS (SELECT 1)"); err != nil {
		t.Fatalf("query: %v", err)
	}
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(t.Context(), "CREATE TABLE t AS SELECT 5 AS n"); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(t.Context())

	if err := srv.Restart(t.Context()); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if got, err := query(t, srv.DSN(), "SELECT n FROM t"); err != nil || got != 5 || srv.DSN() != dsn {
		t.Errorf("after Restart: got %d, %v, dsn %s; want 5, nil, %s", got, err, srv.DSN(), dsn)
	}

	crashed := srv.PID()
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := query(t, dsn, "SELECT 1"); err == nil {
		t.Errorf("query after Kill: got nil, want an error")
	}
	if err := srv.Restart(t.Context()); err != nil {
		t.Fatalf("Restart after Kill: %v", err)
	}
	if got, err := query(t, dsn, "SELECT n FROM t"); err != nil || got != 5 {
		t.Errorf("after crash recovery: got %d, %v, want 5, nil", got, err)
	}

	last := srv.PID()
	if err := srv.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := srv.Close(); err != nil {
		t.Errorf("second Close: got %v, want nil", err)
	}
	for _, p := range []int{pid, crashed, last} {
		if err := syscall.Kill(p, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d after Close: got %v, want ESRCH (gone)", p, err)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("data dir after Close: got %v, want not exist", err)
	}
	if _, err := query(t, dsn, "SELECT 1"); err == nil {
		t.Errorf("query after Close: got nil, want an error")
	}
}

func TestNotFoundMessage(t *testing.T) {
	if got, want := throwaway.ErrNotFound.Error(), "throwaway postgres: PostgreSQL server binaries not found (install Debian package postgresql)"; got != want {
		t.Errorf("ErrNotFound: got %q, want %q", got, want)
	}
}
