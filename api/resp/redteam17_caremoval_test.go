package resp_test

import (
	"bufio"
	"crypto/tls"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/auth"
	"github.com/fencegate/fencegate/api/auth/authtest"
	"github.com/fencegate/fencegate/api/resp"
	"github.com/fencegate/fencegate/proxy"
)

// TestRedTeam17RemovedCAStillNamesRESPConnection: a RESP connection is
// given its identity once, from the client certificate of its handshake
// (server.go handle), and keeps it until the certificate's NotAfter. The
// operator removes the CA that issued it from --trusted-ca-file (a
// compromised or retired CA) and sends SIGHUP: new handshakes with that
// CA's certificates are refused, but the connection opened before goes
// on writing as that principal for as long as the client keeps it open.
// A deny rule cannot replace the removal: the new CA issues the same
// principal to the real worker. Expected: after the reload, the next
// command on that connection is refused UNAUTHENTICATED (as at
// certificate expiry) and does not run.
func TestRedTeam17RemovedCAStillNamesRESPConnection(t *testing.T) {
	srvCA := authtest.NewCA(t, "rt17-resp-server")
	oldCA, newCA := authtest.NewCA(t, "rt17-resp-old"), authtest.NewCA(t, "rt17-resp-new")
	srv := srvCA.Localhost(t, "server")
	client := oldCA.Issue(t, "writer", authtest.Leaf{URIs: []string{"spiffe://test/writer"}, Client: true})

	dir := t.TempDir()
	files := auth.TLSFiles{
		CertFile: filepath.Join(dir, "server.pem"), KeyFile: filepath.Join(dir, "server-key.pem"),
		TrustedCAFile: filepath.Join(dir, "ca.pem"),
	}
	put := func(path string, b []byte) {
		t.Helper()
		if err := os.WriteFile(path+".tmp", b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
	put(files.CertFile, srv.CertPEM)
	put(files.KeyFile, srv.KeyPEM)
	put(files.TrustedCAFile, oldCA.CertPEM)
	st, err := auth.NewServerTLS(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	// As serve wires it: the listeners' reloading TLS config.
	e := newEnvWith(t, resp.Config{TLS: st.Config()}, proxy.Options{AuthRequired: true})
	f := unique("rt17caremoval")
	tok, _ := e.lead(t, f)
	dial := func() (*tls.Conn, error) {
		cfg := srvCA.ClientTLS(client)
		cfg.ServerName = "localhost"
		c, err := tls.Dial("tcp", e.addr, cfg)
		if err == nil {
			// TLS 1.3: a refused client certificate shows at the first read.
			_ = c.SetDeadline(time.Now().Add(20 * time.Second))
			if _, err = c.Write([]byte(cmd("PING"))); err == nil {
				var b [64]byte
				_, err = c.Read(b[:])
			}
			if err != nil {
				c.Close()
			}
		}
		return c, err
	}
	c, err := dial()
	if err != nil {
		t.Fatalf("control: connect with the old CA's certificate while it is trusted: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	r := &raw{t: t, c: c, br: bufio.NewReader(c)}
	r.send(cmd("AUTH", f, strconv.FormatUint(tok, 10)))
	r.want("+OK")
	key := "{" + f + "}:k"
	r.send(cmd("SET", key, "before"))
	r.want("+OK")

	// The operator removes the old CA and sends SIGHUP.
	put(files.TrustedCAFile, newCA.CertPEM)
	if err := st.Reload(); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if c2, err := dial(); err == nil {
		c2.Close()
		t.Fatal("control: a new connection with the removed CA's certificate got through")
	}

	r.send(cmd("SET", key, "after"))
	got := r.line()
	if got == "+OK" || e.stored(t, key) == "after" {
		t.Errorf("HOLE: RESP connection opened before its CA was removed from --trusted-ca-file: SET after the reload answered %q and Redis holds %q; want -UNAUTHENTICATED and nothing written",
			got, e.stored(t, key))
	} else if !strings.HasPrefix(got, "-UNAUTHENTICATED") {
		t.Errorf("SET after the reload: got %q, want -UNAUTHENTICATED...", got)
	}
}
