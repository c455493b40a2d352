package resp_test

import (
	"bufio"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/auth/authtest"
	"github.com/fencegate/fencegate/api/resp"
	"github.com/fencegate/fencegate/proxy"
)

// TestRedTeam8AnonymousAuthHoldsSlot: with authentication required (TLS
// client certificates, as TestPrincipal), a client without a certificate
// is refused every write (UNAUTHENTICATED), yet AUTH <any fence> 1 answers
// +OK: AUTH checks only the form of the fence and token. From then on the
// connection counts as logged in: AuthTimeout no longer applies and the
// unauthenticated limits (10 arguments of 16 KiB) are lifted. So callers
// the gateway will never serve keep MaxConnections' slots for ever
// (AuthTimeout exists so that "clients that never log in cannot keep the
// connections MaxConnections allows from those that do") and may send
// MaxCommandBytes per command ("nobody can make the server hold more
// before it knows who they are", reader.go).
func TestRedTeam8AnonymousAuthHoldsSlot(t *testing.T) {
	ca := authtest.NewCA(t, "rt8")
	srvCert := ca.Localhost(t, "server")
	const authTimeout = 300 * time.Millisecond
	e := newEnvWith(t, resp.Config{
		TLS: &tls.Config{
			Certificates: []tls.Certificate{srvCert.TLS},
			ClientCAs:    ca.Pool(),
			ClientAuth:   tls.VerifyClientCertIfGiven,
		},
		MaxConnections: 1,
		AuthTimeout:    authTimeout,
	}, proxy.Options{AuthRequired: true})
	dial := func() *raw {
		t.Helper()
		c, err := tls.Dial("tcp", e.addr, &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"})
		if err != nil {
			open, refused := e.srv.Connections()
			t.Fatalf("after AuthTimeout, a new client: %v (%d open, %d refused at MaxConnections 1): the anonymous connection, whose every write is refused, still holds the only slot", err, open, refused)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		return &raw{t: t, c: c, br: bufio.NewReader(c)}
	}
	f := unique("rt8anon")
	anon := dial()
	anon.send(cmd("AUTH", f, "1") + cmd("SET", "{"+f+"}:k", "v"))
	authReply := anon.reply()
	setReply := anon.reply()
	t.Logf("anonymous AUTH: %q; SET: %.100q", authReply, setReply)
	if !strings.HasPrefix(authReply, "-UNAUTHENTICATED") && !strings.HasPrefix(setReply, "-UNAUTHENTICATED") {
		t.Fatalf("anonymous AUTH %q, SET %q: want one of them UNAUTHENTICATED", authReply, setReply)
	}
	// The gateway refuses this caller everything; it is no more logged in
	// than before AUTH, and must not outlive AuthTimeout.
	time.Sleep(3 * authTimeout)
	other := dial()
	other.send(cmd("PING"))
	if got, err := other.br.ReadString('\n'); got != "+PONG\r\n" {
		t.Errorf("after AuthTimeout: a new client got %q, %v (closed at MaxConnections): the anonymous connection, whose every write is refused, still holds the only slot", got, err)
	}
	open, refused := e.srv.Connections()
	t.Logf("connections: %d open, %d refused", open, refused)
}
