package auth_test

import (
	"crypto/tls"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/api/auth"
	"github.com/fencegate/fencegate/api/auth/authtest"
)

func TestNewServerTLSRefusesBadFiles(t *testing.T) {
	ca := authtest.NewCA(t, "files")
	srv := ca.Localhost(t, "srv")
	other := ca.Localhost(t, "other")
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	missing := filepath.Join(dir, "missing.pem")
	garbage := write("garbage.pem", "not pem at all\n")
	badDER := write("bad-der.pem", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
	tests := []struct {
		name string
		f    auth.TLSFiles
		want string // the error, which must start with it
	}{
		{"key without cert", auth.TLSFiles{KeyFile: srv.KeyFile}, "--key-file " + srv.KeyFile + ": needs --cert-file"},
		{"cert without key", auth.TLSFiles{CertFile: srv.CertFile}, "--cert-file " + srv.CertFile + ": needs --key-file"},
		{"CA without cert", auth.TLSFiles{TrustedCAFile: ca.File}, "--trusted-ca-file " + ca.File + ": needs --cert-file"},
		{"missing cert", auth.TLSFiles{CertFile: missing, KeyFile: srv.KeyFile}, "--cert-file " + missing + ": no such file or directory"},
		{"garbage cert", auth.TLSFiles{CertFile: garbage, KeyFile: srv.KeyFile}, "--cert-file " + garbage + ": no PEM certificate in it"},
		{"invalid DER", auth.TLSFiles{CertFile: badDER, KeyFile: srv.KeyFile}, "--cert-file " + badDER + ": PEM block 1: x509: "},
		{"key as cert", auth.TLSFiles{CertFile: srv.KeyFile, KeyFile: srv.KeyFile}, "--cert-file " + srv.KeyFile + `: PEM block 1 is "PRIVATE KEY", want CERTIFICATE`},
		{"missing key", auth.TLSFiles{CertFile: srv.CertFile, KeyFile: missing}, "--key-file " + missing + ": no such file or directory"},
		{"garbage key", auth.TLSFiles{CertFile: srv.CertFile, KeyFile: garbage}, "--key-file " + garbage + ": not the key of --cert-file " + srv.CertFile},
		{"other's key", auth.TLSFiles{CertFile: srv.CertFile, KeyFile: other.KeyFile}, "--key-file " + other.KeyFile + ": not the key of --cert-file " + srv.CertFile},
		{"missing CA", auth.TLSFiles{CertFile: srv.CertFile, KeyFile: srv.KeyFile, TrustedCAFile: missing}, "--trusted-ca-file " + missing + ": no such file or directory"},
		{"garbage CA", auth.TLSFiles{CertFile: srv.CertFile, KeyFile: srv.KeyFile, TrustedCAFile: garbage}, "--trusted-ca-file " + garbage + ": no PEM certificate in it"},
		{"min version", auth.TLSFiles{CertFile: srv.CertFile, KeyFile: srv.KeyFile, MinVersion: "1.1"}, `--tls-min-version "1.1": want 1.2 or 1.3`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log, _ := newLog()
			st, err := auth.NewServerTLS(tt.f, log)
			if err == nil {
				t.Fatalf("got %v and no error, want %q", st, tt.want)
			}
			if got := err.Error(); !strings.HasPrefix(got, tt.want) || strings.Contains(got, "\n") {
				t.Fatalf("got error %q, want one line starting %q", got, tt.want)
			}
		})
	}
}

func TestNewServerTLSWithoutCertIsPlain(t *testing.T) {
	log, _ := newLog()
	st, err := auth.NewServerTLS(auth.TLSFiles{MinVersion: "1.3"}, log)
	if err != nil {
		t.Fatal(err)
	}
	if st != nil || st.Config() != nil || st.Reload() != nil {
		t.Fatalf("got %v, config %v; want nil and a nil config", st, st.Config())
	}
}

func TestMinVersion(t *testing.T) {
	ca := authtest.NewCA(t, "minver")
	srv := ca.Localhost(t, "srv")
	tests := []struct {
		min         string
		want        uint16
		tls12Client bool // whether a client capped at TLS 1.2 gets in
	}{
		{"", tls.VersionTLS12, true},
		{"1.2", tls.VersionTLS12, true},
		{"TLS1.2", tls.VersionTLS12, true},
		{"1.3", tls.VersionTLS13, false},
		{"TLS1.3", tls.VersionTLS13, false},
	}
	for _, tt := range tests {
		t.Run(tt.min, func(t *testing.T) {
			log, _ := newLog()
			st, err := auth.NewServerTLS(auth.TLSFiles{CertFile: srv.CertFile, KeyFile: srv.KeyFile, MinVersion: tt.min}, log)
			if err != nil {
				t.Fatal(err)
			}
			if got := st.Config().MinVersion; got != tt.want {
				t.Fatalf("got MinVersion %x, want %x", got, tt.want)
			}
			a, err := auth.NewAuthenticator(false, "", log)
			if err != nil {
				t.Fatal(err)
			}
			addr := startHTTP(t, st, a)
			cfg := ca.ClientTLS(nil)
			cfg.MaxVersion = tls.VersionTLS12
			_, _, err = httpGet(t, httpClient(t, cfg), addr)
			if got := err == nil; got != tt.tls12Client {
				t.Fatalf("TLS 1.2 client got in: %v (%v), want %v", got, err, tt.tls12Client)
			}
		})
	}
}

// TestMTLS: with a CA bundle, only a client certificate it signed gets
// through the handshake, and the caller is named after the certificate's
// first URI SAN, else DNS SAN, else common name.
func TestMTLS(t *testing.T) {
	ca := authtest.NewCA(t, "mtls")
	stranger := authtest.NewCA(t, "stranger")
	srv := ca.Localhost(t, "srv")
	log, _ := newLog()
	st, err := auth.NewServerTLS(auth.TLSFiles{CertFile: srv.CertFile, KeyFile: srv.KeyFile, TrustedCAFile: ca.File}, log)
	if err != nil {
		t.Fatal(err)
	}
	a, err := auth.NewAuthenticator(true, "", log)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Required() {
		t.Fatal("got Required false with client certificates, want true")
	}
	grpcAddr, httpAddr := startGRPC(t, st, a), startHTTP(t, st, a)
	tests := []struct {
		name   string
		client *authtest.Issued
		want   string // principal; "" means the handshake must fail
	}{
		{"no certificate", nil, ""},
		{"another CA's", stranger.Issue(t, "billing", authtest.Leaf{URIs: []string{"spiffe://prod.example/billing/leader"}, Client: true}), ""},
		{"server-only usage", ca.Issue(t, "srvonly", authtest.Leaf{CommonName: "srvonly", Server: true}), ""},
		{"expired", ca.Issue(t, "expired", authtest.Leaf{CommonName: "old", Client: true, NotAfter: time.Now().Add(-time.Minute)}), ""},
		{"URI SAN first", ca.Issue(t, "uri", authtest.Leaf{
			CommonName: "billing", DNSNames: []string{"billing.example"}, Client: true,
			URIs: []string{"spiffe://prod.example/billing/leader", "spiffe://prod.example/other"},
		}), "spiffe://prod.example/billing/leader"},
		{"DNS SAN", ca.Issue(t, "dns", authtest.Leaf{CommonName: "billing", DNSNames: []string{"billing.example", "b.example"}, Client: true}), "dns:billing.example"},
		{"common name", ca.Issue(t, "cn", authtest.Leaf{CommonName: "ops-alice", Client: true}), "cn:ops-alice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ca.ClientTLS(tt.client)
			got, err := dialGRPC(t, grpcAddr, cfg).check(t, nil)
			if tt.want == "" {
				if err == nil {
					t.Fatalf("gRPC: got principal %q, want the handshake refused", got.principal)
				}
			} else if err != nil || got.principal != tt.want {
				t.Fatalf("gRPC: got principal %q (%v), want %q", got.principal, err, tt.want)
			}
			got, _, err = httpGet(t, httpClient(t, cfg), httpAddr)
			if tt.want == "" {
				if err == nil {
					t.Fatalf("HTTP: got principal %q, want the handshake refused", got.principal)
				}
				return
			}
			if err != nil || got.principal != tt.want {
				t.Fatalf("HTTP: got principal %q (%v), want %q", got.principal, err, tt.want)
			}
		})
	}
}

// TestServerCertRotation: a certificate replaced on disk is served to new
// handshakes after the next once-a-second look, without a restart, while
// a connection made before keeps working; a broken replacement keeps the
// previous one, logged once and counted.
func TestServerCertRotation(t *testing.T) {
	ca := authtest.NewCA(t, "rotate")
	first, second := ca.Localhost(t, "first"), ca.Localhost(t, "second")
	f := tlsFiles(t, first.CertPEM, first.KeyPEM, nil)
	clk := newClock()
	log, logs := newLog()
	reg := prometheus.NewRegistry()
	st, err := auth.NewServerTLS(f, log, auth.WithClock(clk.now), auth.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	a, err := auth.NewAuthenticator(false, "", log)
	if err != nil {
		t.Fatal(err)
	}
	addr := startGRPC(t, st, a)
	serial := func(c *grpcClient) string {
		t.Helper()
		got, err := c.check(t, nil)
		if err != nil {
			t.Fatal(err)
		}
		return got.serverCert.SerialNumber.String()
	}
	old := dialGRPC(t, addr, ca.ClientTLS(nil))
	if got, want := serial(old), first.Cert.SerialNumber.String(); got != want {
		t.Fatalf("got serial %s, want %s", got, want)
	}

	install(t, f.KeyFile, second.KeyPEM)
	install(t, f.CertFile, second.CertPEM)
	if got, want := serial(dialGRPC(t, addr, ca.ClientTLS(nil))), first.Cert.SerialNumber.String(); got != want {
		t.Fatalf("within the second: got serial %s, want the old %s (stat at most once a second)", got, want)
	}
	clk.advance(time.Second)
	if got, want := serial(dialGRPC(t, addr, ca.ClientTLS(nil))), second.Cert.SerialNumber.String(); got != want {
		t.Fatalf("new connection: got serial %s, want the new %s", got, want)
	}
	// The same connection, so still the first certificate; a reconnect
	// would have shown the second.
	if got, want := serial(old), first.Cert.SerialNumber.String(); got != want {
		t.Fatalf("connection made before: got serial %s, want %s on the same connection", got, want)
	}

	install(t, f.CertFile, []byte("-----BEGIN CERTIFICATE-----\ntruncated"))
	for range 3 {
		clk.advance(time.Second)
		if got, want := serial(dialGRPC(t, addr, ca.ClientTLS(nil))), second.Cert.SerialNumber.String(); got != want {
			t.Fatalf("after a broken replacement: got serial %s, want the previous %s", got, want)
		}
	}
	if got := logs.errorLines(); len(got) != 1 || !strings.Contains(got[0], "--cert-file "+f.CertFile) {
		t.Fatalf("got error lines %q, want one naming --cert-file %s", got, f.CertFile)
	}
	if got := counter(t, reg, "fencegate_tls_reload_errors_total"); got != 1 {
		t.Fatalf("got fencegate_tls_reload_errors_total %v, want 1", got)
	}
	if err := st.Reload(); err == nil || !strings.HasPrefix(err.Error(), "--cert-file "+f.CertFile) {
		t.Fatalf("Reload: got %v, want an error naming --cert-file", err)
	}

	// Fixed, and picked up by Reload (SIGHUP) without waiting.
	third := ca.Localhost(t, "third")
	install(t, f.KeyFile, third.KeyPEM)
	install(t, f.CertFile, third.CertPEM)
	if err := st.Reload(); err != nil {
		t.Fatal(err)
	}
	if got, want := serial(dialGRPC(t, addr, ca.ClientTLS(nil))), third.Cert.SerialNumber.String(); got != want {
		t.Fatalf("after Reload: got serial %s, want %s", got, want)
	}
}

// TestCABundleRotation: a replaced CA bundle admits the new CA's clients
// and refuses the old CA's, also one resuming a session from before; a
// broken bundle keeps the previous one.
func TestCABundleRotation(t *testing.T) {
	srvCA := authtest.NewCA(t, "server")
	oldCA, newCA := authtest.NewCA(t, "old"), authtest.NewCA(t, "new")
	srv := srvCA.Localhost(t, "srv")
	oldClient := oldCA.Issue(t, "alice", authtest.Leaf{CommonName: "alice", Client: true})
	newClient := newCA.Issue(t, "bob", authtest.Leaf{CommonName: "bob", Client: true})
	f := tlsFiles(t, srv.CertPEM, srv.KeyPEM, oldCA.CertPEM)
	clk := newClock()
	log, logs := newLog()
	st, err := auth.NewServerTLS(f, log, auth.WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	a, err := auth.NewAuthenticator(true, "", log)
	if err != nil {
		t.Fatal(err)
	}
	addr := startHTTP(t, st, a)
	// alice keeps her sessions, to try resuming one after her CA is gone.
	aliceCfg := srvCA.ClientTLS(oldClient)
	aliceCfg.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	alice := httpClient(t, aliceCfg)
	bob := httpClient(t, srvCA.ClientTLS(newClient))
	expect := func(step string, c *http.Client, want string) {
		t.Helper()
		got, _, err := httpGet(t, c, addr)
		switch {
		case want == "" && err == nil:
			t.Fatalf("%s: got principal %q, want refused", step, got.principal)
		case want != "" && (err != nil || got.principal != want):
			t.Fatalf("%s: got principal %q (%v), want %q", step, got.principal, err, want)
		}
	}
	expect("old bundle, alice", alice, "cn:alice")
	if _, resp, err := httpGet(t, alice, addr); err != nil || !resp.TLS.DidResume {
		t.Fatalf("alice's second connection: got error %v, resumed %v; want a resumed session", err, resp != nil && resp.TLS.DidResume)
	}
	expect("old bundle, bob", bob, "")

	install(t, f.TrustedCAFile, newCA.CertPEM)
	clk.advance(time.Second)
	expect("new bundle, bob", bob, "cn:bob")
	expect("new bundle, alice resuming", alice, "")

	install(t, f.TrustedCAFile, []byte("# not a certificate\n"))
	clk.advance(time.Second)
	expect("broken bundle, bob", bob, "cn:bob")
	expect("broken bundle, alice", alice, "")
	if got := logs.errorLines(); len(got) != 1 || !strings.Contains(got[0], "--trusted-ca-file "+f.TrustedCAFile+": no PEM certificate") {
		t.Fatalf("got error lines %q, want one naming --trusted-ca-file", got)
	}
}

// TestHTTP2OverServerTLS: the handshake config offers h2 and HTTP/1.1 by
// ALPN, so net/http serves HTTP/2 behind tls.NewListener and the caller is
// named the same way over it.
func TestHTTP2OverServerTLS(t *testing.T) {
	ca := authtest.NewCA(t, "h2")
	srv := ca.Localhost(t, "srv")
	c := ca.Issue(t, "carol", authtest.Leaf{CommonName: "carol", Client: true})
	log, _ := newLog()
	st, err := auth.NewServerTLS(auth.TLSFiles{CertFile: srv.CertFile, KeyFile: srv.KeyFile, TrustedCAFile: ca.File}, log)
	if err != nil {
		t.Fatal(err)
	}
	a, err := auth.NewAuthenticator(true, "", log)
	if err != nil {
		t.Fatal(err)
	}
	addr := startHTTP(t, st, a)
	for _, h2 := range []bool{false, true} {
		tr := &http.Transport{TLSClientConfig: ca.ClientTLS(c), ForceAttemptHTTP2: h2}
		t.Cleanup(tr.CloseIdleConnections)
		got, resp, err := httpGet(t, &http.Client{Transport: tr, Timeout: 10 * time.Second}, addr)
		if err != nil || got.principal != "cn:carol" {
			t.Fatalf("h2 %v: got principal %q (%v), want cn:carol", h2, got.principal, err)
		}
		if want := map[bool]int{false: 1, true: 2}[h2]; resp.ProtoMajor != want {
			t.Fatalf("got HTTP/%d, want HTTP/%d", resp.ProtoMajor, want)
		}
	}
}
