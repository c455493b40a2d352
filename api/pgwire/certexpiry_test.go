package pgwire_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/api/auth/authtest"
	"github.com/fencegate/fencegate/api/pgwire"
)

// TestCertExpiryEndsSession: the identity a session logs in with lasts
// as long as the client certificate that proved it. At its NotAfter the
// session ends with FATAL 28000, even in the middle of a transaction,
// which the database rolls back.
func TestCertExpiryEndsSession(t *testing.T) {
	ctx := t.Context()
	ca := authtest.NewCA(t, "pgwire-certexpiry")
	srvCert := ca.Localhost(t, "fencegate")
	// x509 keeps whole seconds: it expires within (2 s, 3 s].
	client := ca.Issue(t, "worker", authtest.Leaf{URIs: []string{"spiffe://test/worker"}, Client: true, NotAfter: time.Now().Add(3 * time.Second)})
	e := newEnv(t, pgwire.Config{TLS: func() *tls.Config {
		return &tls.Config{
			Certificates: []tls.Certificate{srvCert.TLS},
			ClientCAs:    ca.Pool(),
			ClientAuth:   tls.RequireAndVerifyClientCert,
			MinVersion:   tls.VersionTLS12,
		}
	}})
	e.table(t, "certexpiry_t")
	tok, _ := e.lead(t, "certexpiry")
	c, err := pgx.Connect(ctx, fmt.Sprintf("postgres://worker@%s/postgres?sslmode=verify-full&sslrootcert=%s&sslcert=%s&sslkey=%s&fencegate.fence=certexpiry&fencegate.token=%d",
		e.addr, ca.File, client.CertFile, client.KeyFile, tok))
	if err != nil {
		t.Fatalf("connect with the valid certificate: %v", err)
	}
	t.Cleanup(func() { c.Close(context.WithoutCancel(ctx)) })

	for _, sql := range []string{"BEGIN", "INSERT INTO certexpiry_t (v) VALUES ('before')"} {
		if _, err := c.Exec(ctx, sql); err != nil {
			t.Fatalf("%s, with the valid certificate: %v", sql, err)
		}
	}
	var pid uint32
	if err := c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatalf("in the transaction, with the valid certificate: %v", err)
	}

	// The session waits for its client, a transaction open; what ends
	// it comes unasked.
	notAfter := client.Cert.NotAfter
	wctx, cancel := context.WithDeadline(ctx, notAfter.Add(10*time.Second))
	defer cancel()
	_, err = c.WaitForNotification(wctx)
	at := time.Now()
	pe := wantCode(t, err, "28000")
	if want := "fencegate: UNAUTHENTICATED: client certificate expired at " + notAfter.UTC().Format(time.RFC3339); !strings.HasPrefix(pe.Message, want) || pe.Severity != "FATAL" {
		t.Errorf("got %s %q, want FATAL %q...", pe.Severity, pe.Message, want)
	}
	if at.Before(notAfter) {
		t.Errorf("session ended at %v, before the certificate expired (%v)", at, notAfter)
	}

	// Its transaction is rolled back: the server connection is gone,
	// and with it the backend.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var n int
		if err := e.admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend %d still there 10 s after the session ended", pid)
		}
	}
	if got := e.count(t, "certexpiry_t"); got != 0 {
		t.Errorf("got %d rows, want 0: the transaction open when the certificate expired rolled back", got)
	}
}
