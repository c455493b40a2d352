package pgwire_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/api/auth"
	"github.com/fencegate/fencegate/api/auth/authtest"
	"github.com/fencegate/fencegate/api/pgwire"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/policy"
)

// rt17Put replaces path with data by renaming a complete file into place.
func rt17Put(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// TestRedTeam17DenyRuleDoesNotReachOpenTransaction: SECURITY.md's answer
// to a compromised worker is "cut one off at once with an effect: deny
// rule for its principal (in force within a second)". Through the
// PostgreSQL listener the policy is consulted once per transaction
// (AdmitSQL, at its first statement); the sweep that ends open
// transactions looks only at their term (Admission.Ended), never at the
// policy. A worker that opened a transaction before the deny rule (and
// keeps it open: the term it holds stays current) goes on writing in it
// after the reload, and its COMMIT applies everything, however long after
// the deny rule is in force. Expected: once a reload denies the session's
// principal the fence, its open transaction is ended (as a transaction
// whose term ended is) and nothing written in it after the reload is
// committed.
func TestRedTeam17DenyRuleDoesNotReachOpenTransaction(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	rt17Put(t, path, []byte(`rules:
  - name: worker-writes
    principals: ["postgres:worker"]
    fences: ["rt17deny"]
    actions: [sql.write]
`))
	store, err := policy.NewStore(path, policy.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, pgwire.Config{}, envOptions{proxy: proxy.Options{Policy: store}})
	e.table(t, "rt17deny_t")
	tok, _ := e.lead(t, "rt17deny")
	c := e.connect(t, "rt17deny", tok)
	for _, sql := range []string{"BEGIN", "INSERT INTO rt17deny_t (v) VALUES ('before the deny rule')"} {
		if _, err := c.Exec(ctx, sql); err != nil {
			t.Fatalf("control, %s before the deny rule: %v", sql, err)
		}
	}

	// The operator cuts the worker off, and sends SIGHUP.
	rt17Put(t, path, []byte(`rules:
  - name: worker-writes
    principals: ["postgres:worker"]
    fences: ["rt17deny"]
    actions: [sql.write]
  - name: cut-off-worker
    effect: deny
    principals: ["postgres:worker"]
    fences: ["*"]
    actions: [sql.write]
`))
	if err := store.Reload(); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if d := store.Decide("postgres:worker", "rt17deny", policy.ActionSQLWrite); d.Allowed {
		t.Fatalf("control: the reloaded policy still allows the worker: %+v", d)
	}
	// Control: a new session's transaction is refused.
	c2 := e.connect(t, "rt17deny", tok)
	if _, err := c2.Exec(ctx, "INSERT INTO rt17deny_t (v) VALUES ('new session')"); err == nil {
		t.Fatal("control: a new session's write after the deny rule went through")
	}

	// Well past "within a second", the open transaction writes and commits.
	time.Sleep(1500 * time.Millisecond)
	_, err1 := c.Exec(ctx, "INSERT INTO rt17deny_t (v) VALUES ('after the deny rule')")
	_, err2 := c.Exec(ctx, "COMMIT")
	if n := e.count(t, "rt17deny_t"); n != 0 {
		t.Errorf("HOLE: a transaction opened before a deny rule for its principal wrote and committed after the reload "+
			"(insert: %v, commit: %v): the table holds %d rows, want 0", err1, err2, n)
	}
}

// TestRedTeam17RemovedCAStillNamesPgwireSession: a PostgreSQL-listener
// session takes its principal from the client certificate of its
// handshake, once, at login (startup.go), and keeps it until the chain's
// NotAfter. The operator removes the CA that issued it from
// --trusted-ca-file (compromised, or retired) and sends SIGHUP: new
// handshakes with that CA's certificates fail, but the session opened
// before goes on being authorized as that principal, transaction after
// transaction, as long as the client keeps it. Expected: after the
// reload the session's next transaction is refused (28000, as at
// certificate expiry) or the session ends; nothing it sends is written.
func TestRedTeam17RemovedCAStillNamesPgwireSession(t *testing.T) {
	ctx := t.Context()
	srvCA := authtest.NewCA(t, "rt17-pg-server")
	oldCA, newCA := authtest.NewCA(t, "rt17-pg-old"), authtest.NewCA(t, "rt17-pg-new")
	srv := srvCA.Localhost(t, "fencegate")
	const who = "spiffe://test/pgworker"
	client := oldCA.Issue(t, "pgworker", authtest.Leaf{URIs: []string{who}, Client: true})
	dir := t.TempDir()
	files := auth.TLSFiles{
		CertFile: filepath.Join(dir, "server.pem"), KeyFile: filepath.Join(dir, "server-key.pem"),
		TrustedCAFile: filepath.Join(dir, "ca.pem"),
	}
	rt17Put(t, files.CertFile, srv.CertPEM)
	rt17Put(t, files.KeyFile, srv.KeyPEM)
	rt17Put(t, files.TrustedCAFile, oldCA.CertPEM)
	st, err := auth.NewServerTLS(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "policy.yaml")
	rt17Put(t, path, []byte(`rules:
  - name: pgworker
    principals: ["`+who+`"]
    fences: ["rt17ca"]
    actions: [sql.write]
`))
	store, err := policy.NewStore(path, policy.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// As serve wires it: the listeners' reloading TLS config.
	e := newEnvWith(t, pgwire.Config{TLS: pgwire.TLSFrom(st.Config())}, envOptions{proxy: proxy.Options{Policy: store, AuthRequired: true}})
	e.table(t, "rt17ca_t")
	tok, _ := e.lead(t, "rt17ca")
	dsn := fmt.Sprintf("postgres://worker@%s/postgres?sslmode=verify-full&sslrootcert=%s&sslcert=%s&sslkey=%s&fencegate.fence=rt17ca&fencegate.token=%d",
		e.addr, srvCA.File, client.CertFile, client.KeyFile, tok)
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("control: connect with the old CA's certificate while it is trusted: %v", err)
	}
	t.Cleanup(func() { c.Close(context.WithoutCancel(ctx)) })
	if _, err := c.Exec(ctx, "INSERT INTO rt17ca_t (v) VALUES ('before')"); err != nil {
		t.Fatalf("control: write before the reload: %v", err)
	}

	// The operator removes the old CA and sends SIGHUP.
	rt17Put(t, files.TrustedCAFile, newCA.CertPEM)
	if err := st.Reload(); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if c2, err := pgx.Connect(ctx, dsn); err == nil {
		c2.Close(ctx)
		t.Fatal("control: a new session with the removed CA's certificate got through")
	}

	_, err = c.Exec(ctx, "INSERT INTO rt17ca_t (v) VALUES ('after')")
	if n := e.count(t, "rt17ca_t"); n != 1 || err == nil {
		t.Errorf("HOLE: PostgreSQL-listener session opened before its CA was removed from --trusted-ca-file: write after the reload got error %v; the table holds %d rows, want 1 (the write refused)", err, n)
	}
}
