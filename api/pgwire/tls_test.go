package pgwire_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/api/auth/authtest"
	"github.com/fencegate/fencegate/api/pgwire"
	pgthrowaway "github.com/fencegate/fencegate/proxy/postgres/throwaway"
)

// TestTLSBothWays: psql (libpq) speaks TLS to the listener and verifies
// its certificate, and the listener speaks TLS to a database that
// requires it, verifying the database's certificate (sslmode=verify-full
// in --postgres-dsn). Both hops are seen encrypted: psql's \conninfo and
// the database's pg_stat_ssl.
func TestTLSBothWays(t *testing.T) {
	ctx := t.Context()
	ca := authtest.NewCA(t, "pgwire-tls")
	dbCert := ca.Localhost(t, "database")
	gwCert := ca.Localhost(t, "fencegate")
	db, err := pgthrowaway.Start(ctx, pgthrowaway.Options{TLS: &pgthrowaway.TLSOptions{CertFile: dbCert.CertFile, KeyFile: dbCert.KeyFile}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.ListenerRole(ctx, "worker"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.RuntimeRole(ctx, "gateway"); err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, db.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	// TLS only, for every client of the database.
	hba := "hostssl all all 127.0.0.1/32 trust\nhostnossl all all 0.0.0.0/0 reject\nlocal all all trust\n"
	if err := os.WriteFile(db.DataDir()+"/pg_hba.conf", []byte(hba), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		"SELECT pg_reload_conf()",
		"CREATE TABLE tls_t (v text)",
		"GRANT SELECT, INSERT ON tls_t TO worker",
	} {
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	time.Sleep(200 * time.Millisecond) // the postmaster reloads asynchronously

	for _, mode := range []string{"verify-full", "require"} {
		t.Run("to the database with sslmode="+mode, func(t *testing.T) {
			e := newEnvWith(t, pgwire.Config{
				PostgresDSN: fmt.Sprintf("postgres://ignored@localhost:%d/postgres?sslmode=%s&sslrootcert=%s", db.Port(), mode, ca.File),
				TLS: func() *tls.Config {
					return &tls.Config{Certificates: []tls.Certificate{gwCert.TLS}, MinVersion: tls.VersionTLS12}
				},
			}, envOptions{poolDSN: fmt.Sprintf("postgres://gateway@localhost:%d/postgres?sslmode=%s&sslrootcert=%s", db.Port(), mode, ca.File)})
			tok, _ := e.lead(t, "tls")
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(cctx, "psql", "-X", "-At", "-v", "ON_ERROR_STOP=1",
				"-h", "127.0.0.1", "-p", e.port, "-U", "worker", "-d", "postgres",
				"-c", `\conninfo`,
				"-c", "INSERT INTO tls_t VALUES ('"+mode+"')",
				"-c", "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
			cmd.Env = append(withoutPG(os.Environ()),
				"PGSSLMODE=verify-full", "PGSSLROOTCERT="+ca.File,
				fmt.Sprintf("PGOPTIONS=-c fencegate.fence=tls -c fencegate.token=%d", tok))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("psql through fencegate over TLS: %v\n%s", err, out)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if !strings.Contains(string(out), "\nSSL connection (protocol: TLS") || lines[len(lines)-1] != "t" {
				t.Fatalf("psql printed %q; want \\conninfo's SSL line, then t from pg_stat_ssl (the database's side encrypted)", out)
			}
		})
	}
	var n int
	if err := admin.QueryRow(ctx, "SELECT count(*) FROM tls_t").Scan(&n); err != nil || n != 2 {
		t.Fatalf("got %d rows (%v), want the 2 written over TLS", n, err)
	}

	t.Run("a client without TLS is refused by the database", func(t *testing.T) {
		e := newEnv(t, pgwire.Config{PostgresDSN: fmt.Sprintf("postgres://ignored@127.0.0.1:%d/postgres?sslmode=disable", db.Port())})
		tok, _ := e.lead(t, "tls")
		_, err := pgx.Connect(ctx, e.dsn("worker", "tls", tok))
		wantCode(t, err, "28000") // the database's hostnossl reject
	})
}

// TestUnixSocket: --postgres-dsn may name the database's Unix socket
// directory, as libpq's host=/dir does.
func TestUnixSocket(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{PostgresDSN: fmt.Sprintf("host=%s port=%d user=ignored dbname=postgres", pgServer.SocketDir(), pgServer.Port())})
	e.table(t, "unix_t")
	tok, _ := e.lead(t, "unix")
	c := e.connect(t, "unix", tok)
	if _, err := c.Exec(ctx, "INSERT INTO unix_t (v) VALUES ('over the socket')"); err != nil {
		t.Fatal(err)
	}
	var local bool
	if err := c.QueryRow(ctx, "SELECT inet_client_addr() IS NULL").Scan(&local); err != nil || !local {
		t.Fatalf("got inet_client_addr() IS NULL = %v (%v), want true: the server connection is the Unix socket", local, err)
	}
	if got := e.count(t, "unix_t"); got != 1 {
		t.Fatalf("got %d rows, want 1", got)
	}
}

func withoutPG(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "PG") {
			out = append(out, kv)
		}
	}
	return out
}
