package resp_test

import (
	"bufio"
	"crypto/tls"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/auth/authtest"
	"github.com/fencegate/fencegate/api/resp"
	"github.com/fencegate/fencegate/proxy"
)

// TestCertExpiryEndsSession: the identity a connection is given at its
// start lasts as long as the client certificate that proved it. The
// first command after its NotAfter is refused UNAUTHENTICATED, does not
// run, and the connection closes.
func TestCertExpiryEndsSession(t *testing.T) {
	ca := authtest.NewCA(t, "resp-certexpiry")
	srvCert := ca.Localhost(t, "server")
	// x509 keeps whole seconds: it expires within (2 s, 3 s].
	client := ca.Issue(t, "writer", authtest.Leaf{URIs: []string{"spiffe://test/writer"}, Client: true, NotAfter: time.Now().Add(3 * time.Second)})
	e := newEnvWith(t, resp.Config{TLS: &tls.Config{
		Certificates: []tls.Certificate{srvCert.TLS},
		ClientCAs:    ca.Pool(),
		ClientAuth:   tls.RequireAndVerifyClientCert,
	}}, proxy.Options{AuthRequired: true})
	f := unique("certexpiry")
	tok, _ := e.lead(t, f)
	cfg := ca.ClientTLS(client)
	cfg.ServerName = "localhost"
	c, err := tls.Dial("tcp", e.addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	notAfter := client.Cert.NotAfter
	_ = c.SetDeadline(notAfter.Add(20 * time.Second))
	r := &raw{t: t, c: c, br: bufio.NewReader(c)}
	r.send(cmd("AUTH", f, strconv.FormatUint(tok, 10)))
	r.want("+OK")

	// Writes go through until the certificate expires.
	key := "{" + f + "}:k"
	last, got := -1, ""
	for i := 0; ; i++ {
		r.send(cmd("SET", key, strconv.Itoa(i)))
		if got = r.line(); got != "+OK" {
			break
		}
		last = i
		if time.Now().After(notAfter.Add(5 * time.Second)) {
			t.Fatalf("SET still answered +OK 5 s after the client certificate expired (%v)", notAfter)
		}
		time.Sleep(50 * time.Millisecond)
	}
	at := time.Now()
	if last < 0 {
		t.Fatalf("control: the first SET, with the valid certificate: got %q, want +OK", got)
	}
	if want := "-UNAUTHENTICATED fencegate: client certificate expired at " + notAfter.UTC().Format(time.RFC3339); !strings.HasPrefix(got, want) {
		t.Fatalf("got %q, want %q...", got, want)
	}
	if at.Before(notAfter) {
		t.Errorf("refused at %v, before the certificate expired (%v)", at, notAfter)
	}
	r.closed()
	if v, err := e.admin.Get(t.Context(), key).Result(); err != nil || v != strconv.Itoa(last) {
		t.Errorf("Redis holds %q (%v), want %q: the SET refused did not run", v, err, strconv.Itoa(last))
	}
}
