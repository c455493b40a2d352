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
func admin(tb testing.TB) *pgx.Conn {
	tb.Helper()
	conn, err := pgx.Connect(tb.Context(), server.DSN())
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	tb.Cleanup(func() { _ = conn.Close(context.WithoutCancel(tb.Context())) })
	return conn
}

func mustExec(tb testing.TB, conn *pgx.Conn, sql string, args ...any) {
	tb.Helper()
	if _, err := conn.Exec(tb.Context(), sql, args...); err != nil {
		tb.Fatalf("%s: %v", sql, err)
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
