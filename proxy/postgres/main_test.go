package postgres

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/fencegate/fencegate/proxy/postgres/throwaway"
)

var (
	server  *throwaway.Server
	backend *Backend // shared by the tests; migrated
	// runtimeDSN logs in as the role fencegate serves as: a member of
	// migrations.RuntimeRole, not a superuser.
	runtimeDSN string
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	ctx := context.Background()
	srv, err := throwaway.Start(ctx, throwaway.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := srv.Close(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	server = srv
	runtimeDSN, err = srv.RuntimeRole(ctx, "fencegate_test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	b, err := Open(ctx, runtimeDSN, Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := b.CheckRole(ctx, false); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	backend = b
	code := m.Run()
	b.Close()
	if termBackend != nil {
		termBackend.Close()
	}
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

var seq atomic.Int64

// unique returns a name no other test uses.
func unique(prefix string) string { return fmt.Sprintf("%s_%d", prefix, seq.Add(1)) }

// admin returns a plain connection for setting up and checking state.
func admin(t testing.TB) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), server.DSN())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.WithoutCancel(t.Context())) })
	return conn
}

func mustExec(t testing.TB, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(t.Context(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func count(t *testing.T, conn *pgx.Conn, table string) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}
