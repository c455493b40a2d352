package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencegate/fencegate/api/auth/authtest"
	"github.com/fencegate/fencegate/election/freeport"
)

// TestServePgListener runs `fencegate serve --pg-listen-addr` with mTLS
// and a policy: a PostgreSQL client presenting a certificate the policy
// allows writes its fence through the listener, over TLS; one it does
// not allow is refused with 42501 and writes nothing; a stale token is
// refused with FG001. On the listener's Unix socket psql connects without
// TLS, as to PostgreSQL's own, and the policy still applies: principal
// postgres:app, which no rule names, is refused.
func TestServePgListener(t *testing.T) {
	ctx := t.Context()
	e := newSecureEnv(t)
	for _, sql := range []string{
		"CREATE TABLE pg_t (v text)",
		"GRANT SELECT, INSERT ON pg_t TO app",
	} {
		if _, err := e.admin.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	alice := e.ca.Issue(t, "alice", authtest.Leaf{URIs: []string{"spiffe://test/a/alice"}, Client: true})
	bob := e.ca.Issue(t, "bob", authtest.Leaf{URIs: []string{"spiffe://test/b/bob"}, Client: true})
	policyFile := e.writeFile(t, "policy.yaml", `rules:
  - name: alice-writes-a
    principals: ["spiffe://test/a/alice"]
    fences: ["a"]
    actions: [sql.write]
`)
	pgAddr := freeport.Addr(t)
	sockDir := t.TempDir()
	e.serveGateway(t, "--pg-listen-addr="+pgAddr, "--pg-unix-socket-dir="+sockDir, "--cert-file="+e.srv.CertFile, "--key-file="+e.srv.KeyFile,
		"--trusted-ca-file="+e.ca.File, "--policy-file="+policyFile)
	tok := e.lead(t, "a", "alice")
	connect := func(cert *authtest.Issued, token uint64) (*pgx.Conn, error) {
		cfg, err := pgx.ParseConfig(fmt.Sprintf("postgres://app@%s/postgres?sslmode=require&fencegate.fence=a&fencegate.token=%d", pgAddr, token))
		if err != nil {
			t.Fatal(err)
		}
		cfg.TLSConfig = e.ca.ClientTLS(cert)
		cfg.TLSConfig.ServerName = "localhost"
		cfg.Fallbacks = nil
		return pgx.ConnectConfig(ctx, cfg)
	}
	ac, err := connect(alice, tok)
	if err != nil {
		t.Fatalf("alice over TLS: %v", err)
	}
	defer ac.Close(context.WithoutCancel(ctx))
	if _, err := ac.Exec(ctx, "INSERT INTO pg_t VALUES ($1)", "alice"); err != nil {
		t.Fatalf("alice: %v", err)
	}
	bc, err := connect(bob, tok)
	if err != nil {
		t.Fatalf("bob over TLS: %v", err)
	}
	defer bc.Close(context.WithoutCancel(ctx))
	_, err = bc.Exec(ctx, "INSERT INTO pg_t VALUES ($1)", "bob")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "42501" || !strings.HasPrefix(pe.Message, "fencegate: NOT_AUTHORIZED: ") {
		t.Fatalf("bob: got %v, want fencegate's NOT_AUTHORIZED with 42501", err)
	}
	stale, err := connect(alice, tok-1)
	if err != nil {
		t.Fatal(err)
	}
	defer stale.Close(context.WithoutCancel(ctx))
	if _, err := stale.Exec(ctx, "INSERT INTO pg_t VALUES ('stale')"); !errors.As(err, &pe) || pe.Code == "" || !strings.HasPrefix(pe.Message, "fencegate: ") {
		t.Fatalf("stale token: got %v, want a fencegate refusal", err)
	}
	if got := e.count(t, "pg_t"); got != 1 {
		t.Fatalf("got %d rows, want alice's only", got)
	}

	_, pgPort, _ := strings.Cut(pgAddr, ":")
	psql := exec.CommandContext(ctx, "psql", "-h", sockDir, "-p", pgPort, "-U", "app", "-v", "ON_ERROR_STOP=1", "-c", "INSERT INTO pg_t VALUES ('socket')", "postgres")
	psql.Env = append(os.Environ(), fmt.Sprintf("PGOPTIONS=-c fencegate.fence=a -c fencegate.token=%d", tok))
	out, err := psql.CombinedOutput()
	if err == nil || !strings.Contains(string(out), `fencegate: NOT_AUTHORIZED: "postgres:app" may not sql.write fence "a"`) {
		t.Fatalf("psql over the Unix socket: %v: %s; want the policy's refusal of postgres:app", err, out)
	}
	if got := e.count(t, "pg_t"); got != 1 {
		t.Fatalf("got %d rows after the socket's refused write, want 1", got)
	}
}

// TestPgListenExposure: --pg-listen-addr beyond loopback needs TLS and a
// policy, like the other listeners.
func TestPgListenExposure(t *testing.T) {
	err := run(t.Context(), []string{"serve", "--postgres-dsn=postgres://x@127.0.0.1:1/x", "--pg-listen-addr=0.0.0.0:0"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--pg-listen-addr 0.0.0.0:0 is reachable from other hosts") {
		t.Fatalf("got %v, want the exposure refusal naming --pg-listen-addr", err)
	}
}

// TestServePgListenerUnauthorizedCannotReplaceCheck: a client the policy
// does not allow to write fence a still gets a session bound to a (the
// binding is made at login, before any transaction is authorized), but it
// cannot run the SQL that would replace fencegate's check on it, nor
// call the check itself for a with a token of its own: every statement is
// NOT_AUTHORIZED, so fence a's mark does not move.
func TestServePgListenerUnauthorizedCannotReplaceCheck(t *testing.T) {
	ctx := t.Context()
	e := newSecureEnv(t)
	alice := e.ca.Issue(t, "alice", authtest.Leaf{URIs: []string{"spiffe://test/a/alice"}, Client: true})
	bob := e.ca.Issue(t, "bob", authtest.Leaf{URIs: []string{"spiffe://test/b/bob"}, Client: true})
	policyFile := e.writeFile(t, "policy.yaml", `rules:
  - name: alice-writes-a
    principals: ["spiffe://test/a/alice"]
    fences: ["a"]
    actions: [sql.write]
`)
	pgAddr := freeport.Addr(t)
	e.serveGateway(t, "--pg-listen-addr="+pgAddr, "--cert-file="+e.srv.CertFile, "--key-file="+e.srv.KeyFile,
		"--trusted-ca-file="+e.ca.File, "--policy-file="+policyFile)
	tok := e.lead(t, "a", "alice")
	connect := func(cert *authtest.Issued) *pgx.Conn {
		cfg, err := pgx.ParseConfig(fmt.Sprintf("postgres://app@%s/postgres?sslmode=require&fencegate.fence=a&fencegate.token=%d", pgAddr, tok))
		if err != nil {
			t.Fatal(err)
		}
		cfg.TLSConfig = e.ca.ClientTLS(cert)
		cfg.TLSConfig.ServerName = "localhost"
		cfg.Fallbacks = nil
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.WithoutCancel(ctx)) })
		return c
	}
	ac := connect(alice)
	if _, err := ac.Exec(ctx, "SELECT 1"); err != nil { // a's mark is alice's term
		t.Fatal(err)
	}
	bc := connect(bob)
	const replace = "DO $$ BEGIN EXECUTE 'DEALLOC' || 'ATE fence' || 'gate_advance_1'; " +
		"EXECUTE 'PREP' || 'ARE fence' || 'gate_advance_1(text, int8) AS SELECT 0::int8'; END $$"
	const raise = "SELECT pg_catalog.query_to_xml('SELECT fence' || 'gate.advance_session(''a'', 9223372036854775807)', true, true, '')"
	for _, sql := range []string{replace, raise} {
		// In the extended protocol DO is refused before the policy is
		// asked (FG006); either refusal runs nothing.
		_, err := bc.PgConn().ExecParams(ctx, sql, nil, nil, nil, nil).Close()
		if code := pgCode(err); code != "42501" && (sql != replace || code != "FG006") {
			t.Errorf("bob, not allowed to write a: %.40s…: got %v, want NOT_AUTHORIZED (42501)", sql, err)
		}
		_, err = bc.Exec(ctx, sql)
		if code := pgCode(err); code != "42501" {
			t.Errorf("bob, simple query: %.40s…: got %v, want NOT_AUTHORIZED (42501)", sql, err)
		}
	}
	var mark uint64
	if err := e.admin.QueryRow(ctx, "SELECT token FROM fencegate.fences WHERE name = 'a'").Scan(&mark); err != nil {
		t.Fatal(err)
	}
	if mark != tok {
		t.Fatalf("fence a's mark moved from %d to %d", tok, mark)
	}
	if _, err := ac.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatalf("alice after bob's attempts: %v", err)
	}
}

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}
