package auth_test

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/metadata"

	"github.com/fencegate/fencegate/api/auth"
	"github.com/fencegate/fencegate/api/auth/authtest"
)

func hashHex(secret string) string {
	s := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(s[:])
}

// tokenLines is a token file holding name and the hash of secret, pairwise.
func tokenLines(pairs ...string) []byte {
	var b strings.Builder
	b.WriteString("# fencegate tokens\n\n")
	for i := 0; i+1 < len(pairs); i += 2 {
		fmt.Fprintf(&b, "%s %s\n", pairs[i], hashHex(pairs[i+1]))
	}
	return []byte(b.String())
}

func tokenFile(t *testing.T, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens")
	install(t, p, data)
	return p
}

func TestPrincipalOf(t *testing.T) {
	u := func(s string) *url.URL {
		p, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name string
		cert x509.Certificate
		want string
	}{
		{"URI first", x509.Certificate{
			URIs: []*url.URL{u("spiffe://prod.example/billing/leader"), u("spiffe://x/y")}, DNSNames: []string{"a.example"},
			Subject: pkix.Name{CommonName: "a"},
		}, "spiffe://prod.example/billing/leader"},
		{"DNS next", x509.Certificate{DNSNames: []string{"a.example", "b.example"}, Subject: pkix.Name{CommonName: "a"}}, "dns:a.example"},
		{"CN last", x509.Certificate{Subject: pkix.Name{CommonName: "ops-alice"}}, "cn:ops-alice"},
		{"nothing", x509.Certificate{}, ""},
	}
	for _, tt := range tests {
		if got := auth.PrincipalOf(&tt.cert); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestTokenFileRefusesBadLines(t *testing.T) {
	h := hashHex("s3cret")
	tests := []struct {
		name string
		data string
		want string // after "--token-auth-file <path>"
	}{
		{"one field", "# c\nalice\n", ":2: want <name> <sha256 hex of the secret>, got 1 fields"},
		{"trailing comment", "alice " + h + " # trailing\n", ":1: want <name> <sha256 hex of the secret>, got 4 fields"},
		{"secret not hash", "alice s3cret\n", `:1: token "alice": want 64 hex digits (the sha256 of the secret, never the secret), got 6 characters`},
		{"not hex", "alice " + strings.Repeat("zz", 32) + "\n", `:1: token "alice": want 64 hex digits`},
		{"same name", "alice " + h + "\n\nalice " + hashHex("other") + "\n", `:3: token "alice" again (also on line 1)`},
		{"same secret", "alice " + h + "\nbob " + strings.ToUpper(h) + "\n", `:2: token "bob" has the same secret as line 1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tokenFile(t, []byte(tt.data))
			log, _ := newLog()
			_, err := auth.NewAuthenticator(false, p, log)
			want := "--token-auth-file " + p + tt.want
			if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("got %v, want one line starting %q", err, want)
			}
		})
	}
	log, _ := newLog()
	missing := filepath.Join(t.TempDir(), "missing")
	if _, err := auth.NewAuthenticator(false, missing, log); err == nil || err.Error() != "--token-auth-file "+missing+": no such file or directory" {
		t.Fatalf("missing file: got %v", err)
	}
}

// bearerServers serves gRPC and HTTP over TLS without client certificates,
// identifying callers by the token file at path.
func bearerServers(t *testing.T, path string, opts ...auth.Option) (a *auth.Authenticator, grpcAddr, httpAddr string, ca *authtest.CA, logs *logBuf) {
	t.Helper()
	ca = authtest.NewCA(t, "bearer")
	srv := ca.Localhost(t, "srv")
	log, logs := newLog()
	st, err := auth.NewServerTLS(auth.TLSFiles{CertFile: srv.CertFile, KeyFile: srv.KeyFile}, log)
	if err != nil {
		t.Fatal(err)
	}
	a, err = auth.NewAuthenticator(false, path, log, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return a, startGRPC(t, st, a), startHTTP(t, st, a), ca, logs
}

// TestBearer: a bearer secret listed in the token file names its caller
// token:<name> over gRPC (unary and stream) and HTTP; any other
// authorization leaves the caller anonymous with AuthError set.
func TestBearer(t *testing.T) {
	path := tokenFile(t, tokenLines("billing-cron", "s3cret-billing", "ops", "s3cret-ops"))
	a, grpcAddr, httpAddr, ca, _ := bearerServers(t, path)
	if !a.Required() {
		t.Fatal("got Required false with a token file, want true")
	}
	gc := dialGRPC(t, grpcAddr, ca.ClientTLS(nil))
	hc := httpClient(t, ca.ClientTLS(nil))
	const unknown, many = "bearer token not recognised", "more than one authorization value"
	tests := []struct {
		name          string
		authorization []string
		principal     string
		authErr       string
	}{
		{"none", nil, "", ""},
		{"right secret", []string{"Bearer s3cret-billing"}, "token:billing-cron", ""},
		{"scheme in any case", []string{"bEaReR s3cret-ops"}, "token:ops", ""},
		{"wrong secret", []string{"Bearer s3cret-wrong"}, "", unknown},
		{"the stored hash as the secret", []string{"Bearer " + hashHex("s3cret-billing")}, "", unknown},
		{"secret without scheme", []string{"s3cret-billing"}, "", unknown},
		{"other scheme", []string{"Basic czNjcmV0LWJpbGxpbmc="}, "", unknown},
		{"empty secret", []string{"Bearer "}, "", unknown},
		{"two values", []string{"Bearer s3cret-billing", "Bearer s3cret-ops"}, "", many},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			md := metadata.MD{}
			var hdr []string
			for _, v := range tt.authorization {
				md.Append("authorization", v)
				hdr = append(hdr, "Authorization", v)
			}
			for _, call := range []struct {
				name string
				do   func() (answer, error)
			}{
				{"gRPC unary", func() (answer, error) { return gc.check(t, md) }},
				{"gRPC stream", func() (answer, error) { return gc.watch(t, md) }},
				{"HTTP", func() (answer, error) { a, _, err := httpGet(t, hc, httpAddr, hdr...); return a, err }},
			} {
				got, err := call.do()
				if err != nil {
					t.Fatalf("%s: %v", call.name, err)
				}
				if got.principal != tt.principal || got.authErr != tt.authErr {
					t.Errorf("%s: got principal %q, AuthError %q; want %q, %q", call.name, got.principal, got.authErr, tt.principal, tt.authErr)
				}
				if got.sawAuth != "" {
					t.Errorf("%s: the handler saw authorization %q, want it removed", call.name, got.sawAuth)
				}
			}
		})
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "s3cret") {
		t.Fatalf("token file holds a secret: %q", raw)
	}
}

// TestSpoofing: nothing but a verified certificate or a listed bearer
// secret names the caller: not made-up metadata or headers, not a caller
// an earlier interceptor attached, not a valid bearer secret of another
// identity sent alongside a certificate. The secret never reaches the
// handlers over HTTP, neither as a header nor as grpc-gateway metadata.
func TestSpoofing(t *testing.T) {
	ca := authtest.NewCA(t, "spoof")
	srv := ca.Localhost(t, "srv")
	alice := ca.Issue(t, "alice", authtest.Leaf{CommonName: "alice", Client: true})
	path := tokenFile(t, tokenLines("admin", "s3cret-admin"))
	log, _ := newLog()
	mtls, err := auth.NewServerTLS(auth.TLSFiles{CertFile: srv.CertFile, KeyFile: srv.KeyFile, TrustedCAFile: ca.File}, log)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := auth.NewServerTLS(auth.TLSFiles{CertFile: srv.CertFile, KeyFile: srv.KeyFile}, log)
	if err != nil {
		t.Fatal(err)
	}
	a, err := auth.NewAuthenticator(true, path, log)
	if err != nil {
		t.Fatal(err)
	}
	spoof := []string{
		"x-fencegate-principal", "token:admin",
		"principal", "token:admin",
		"x-forwarded-client-cert", "URI=spiffe://prod.example/admin",
		"x-remote-user", "admin",
		"grpcgateway-authorization", "Bearer s3cret-admin",
	}
	tests := []struct {
		name      string
		st        *auth.ServerTLS
		client    *authtest.Issued
		extra     []string // more headers / metadata
		principal string
	}{
		{"anonymous", plain, nil, nil, ""},
		{"certificate with another's bearer", mtls, alice, []string{"authorization", "Bearer s3cret-admin"}, "cn:alice"},
		{"certificate with a forged bearer", mtls, alice, []string{"authorization", "Bearer forged"}, "cn:alice"},
		{"anonymous with gateway metadata header", plain, nil, []string{"grpc-metadata-authorization", "Bearer s3cret-admin"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			grpcAddr, httpAddr := startGRPC(t, tt.st, a), startHTTP(t, tt.st, a)
			pairs := append(append([]string{}, spoof...), tt.extra...)
			cfg := ca.ClientTLS(tt.client)
			gc := dialGRPC(t, grpcAddr, cfg)
			for _, call := range []struct {
				name string
				do   func() (answer, error)
			}{
				{"gRPC unary", func() (answer, error) { return gc.check(t, metadata.Pairs(pairs...)) }},
				{"gRPC stream", func() (answer, error) { return gc.watch(t, metadata.Pairs(pairs...)) }},
				{"HTTP", func() (answer, error) { a, _, err := httpGet(t, httpClient(t, cfg), httpAddr, pairs...); return a, err }},
			} {
				got, err := call.do()
				if err != nil {
					t.Fatalf("%s: %v", call.name, err)
				}
				if got.principal != tt.principal {
					t.Errorf("%s: got principal %q, want %q", call.name, got.principal, tt.principal)
				}
				if got.sawAuth != "" {
					t.Errorf("%s: the handler saw authorization %q, want it removed", call.name, got.sawAuth)
				}
			}
		})
	}
}

// TestIdentifyTrustsOnlyVerifiedChains: certificates the handshake did not
// verify (PeerCertificates alone), or verified chains when client
// certificates are not configured, name nobody.
func TestIdentifyTrustsOnlyVerifiedChains(t *testing.T) {
	ca := authtest.NewCA(t, "verified")
	c := ca.Issue(t, "alice", authtest.Leaf{CommonName: "alice", Client: true}).Cert
	peer := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5}
	log, _ := newLog()
	certs, err := auth.NewAuthenticator(true, "", log)
	if err != nil {
		t.Fatal(err)
	}
	none, err := auth.NewAuthenticator(false, "", log)
	if err != nil {
		t.Fatal(err)
	}
	verified := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{c}, VerifiedChains: [][]*x509.Certificate{{c, ca.Cert}}}
	tests := []struct {
		name  string
		a     *auth.Authenticator
		state *tls.ConnectionState
		want  string
	}{
		{"verified", certs, verified, "cn:alice"},
		{"presented, not verified", certs, &tls.ConnectionState{PeerCertificates: []*x509.Certificate{c}}, ""},
		{"no TLS", certs, nil, ""},
		{"client certificates not configured", none, verified, ""},
	}
	for _, tt := range tests {
		got := tt.a.Identify(tt.state, "", peer)
		if got.Principal != tt.want || got.Peer != peer {
			t.Errorf("%s: got %q from %v, want %q from %v", tt.name, got.Principal, got.Peer, tt.want, peer)
		}
	}
}

// TestIdentifyCertAllocs: naming a caller by a known certificate allocates
// the Caller and nothing else, looking its CA up among the trust anchors
// of a ServerTLS's bundle included.
func TestIdentifyCertAllocs(t *testing.T) {
	ca := authtest.NewCA(t, "allocs")
	log, _ := newLog()
	a, err := auth.NewAuthenticator(true, "", log)
	if err != nil {
		t.Fatal(err)
	}
	srv := ca.Localhost(t, "srv")
	if _, err := auth.NewServerTLS(tlsFiles(t, srv.CertPEM, srv.KeyPEM, ca.CertPEM), log); err != nil {
		t.Fatal(err)
	}
	for _, l := range []authtest.Leaf{
		{URIs: []string{"spiffe://prod.example/billing/leader"}, Client: true},
		{DNSNames: []string{"billing.example"}, Client: true},
		{CommonName: "alice", Client: true},
	} {
		c := ca.Issue(t, "leaf", l).Cert
		state := &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{c, ca.Cert}}}
		peer := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5}
		want := auth.PrincipalOf(c)
		got := testing.AllocsPerRun(100, func() {
			if p := a.Identify(state, "Bearer ignored", peer).Principal; p != want {
				t.Fatalf("got %q, want %q", p, want)
			}
		})
		if got != 1 {
			t.Errorf("%s: got %v allocations per Identify, want 1 (the Caller)", want, got)
		}
	}
}

// TestTokenFileReload: an edited token file takes effect without a
// restart; a broken edit keeps the previous tokens, logged once and
// counted.
func TestTokenFileReload(t *testing.T) {
	path := tokenFile(t, tokenLines("old", "s3cret-old"))
	clk := newClock()
	reg := prometheus.NewRegistry()
	_, grpcAddr, httpAddr, ca, logs := bearerServers(t, path, auth.WithClock(clk.now), auth.WithRegisterer(reg))
	gc := dialGRPC(t, grpcAddr, ca.ClientTLS(nil))
	hc := httpClient(t, ca.ClientTLS(nil))
	expect := func(step, secret, want string) {
		t.Helper()
		got, err := gc.check(t, metadata.Pairs("authorization", "Bearer "+secret))
		if err != nil || got.principal != want {
			t.Fatalf("%s, gRPC: got principal %q (%v), want %q", step, got.principal, err, want)
		}
		got, _, err = httpGet(t, hc, httpAddr, "Authorization", "Bearer "+secret)
		if err != nil || got.principal != want {
			t.Fatalf("%s, HTTP: got principal %q (%v), want %q", step, got.principal, err, want)
		}
	}
	expect("start", "s3cret-old", "token:old")

	install(t, path, tokenLines("new", "s3cret-new"))
	expect("within the second", "s3cret-old", "token:old")
	clk.advance(time.Second)
	expect("edited, new token", "s3cret-new", "token:new")
	expect("edited, removed token", "s3cret-old", "")

	// Written in place, not renamed: the size tells.
	if err := os.WriteFile(path, tokenLines("new", "s3cret-new", "more", "s3cret-more"), 0o600); err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Second)
	expect("edited in place", "s3cret-more", "token:more")

	install(t, path, append(tokenLines("newest", "s3cret-newest"), "broken line here\n"...))
	for range 3 {
		clk.advance(time.Second)
		expect("broken edit, previous token", "s3cret-more", "token:more")
		expect("broken edit, token of the broken file", "s3cret-newest", "")
	}
	if got := logs.errorLines(); len(got) != 1 || !strings.Contains(got[0], "--token-auth-file "+path+":4:") {
		t.Fatalf("got error lines %q, want one naming --token-auth-file %s:4", got, path)
	}
	if got := counter(t, reg, "fencegate_token_file_reload_errors_total"); got != 1 {
		t.Fatalf("got fencegate_token_file_reload_errors_total %v, want 1", got)
	}
}

func TestReloadOnSignal(t *testing.T) {
	path := tokenFile(t, tokenLines("old", "s3cret-old"))
	clk := newClock() // never advanced: only Reload can pick up the edit
	log, _ := newLog()
	a, err := auth.NewAuthenticator(false, path, log, auth.WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	install(t, path, tokenLines("new", "s3cret-new"))
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := a.Identify(nil, "Bearer s3cret-new", nil).Principal; got != "token:new" {
		t.Fatalf("after Reload: got %q, want token:new", got)
	}
	install(t, path, []byte("broken\n"))
	if err := a.Reload(); err == nil || !strings.HasPrefix(err.Error(), "--token-auth-file "+path+":1: ") {
		t.Fatalf("Reload of a broken file: got %v, want an error naming it", err)
	}
	if got := a.Identify(nil, "Bearer s3cret-new", nil).Principal; got != "token:new" {
		t.Fatalf("after a failed Reload: got %q, want token:new kept", got)
	}
}

func BenchmarkIdentify(b *testing.B) {
	ca := authtest.NewCA(b, "bench")
	c := ca.Issue(b, "leaf", authtest.Leaf{URIs: []string{"spiffe://prod.example/billing/leader"}, Client: true}).Cert
	var pairs []string
	for i := range 20 {
		pairs = append(pairs, fmt.Sprintf("tok%d", i), fmt.Sprintf("s3cret-%d", i))
	}
	dir := b.TempDir()
	path := filepath.Join(dir, "tokens")
	if err := os.WriteFile(path, tokenLines(pairs...), 0o600); err != nil {
		b.Fatal(err)
	}
	log, _ := newLog()
	a, err := auth.NewAuthenticator(true, path, log)
	if err != nil {
		b.Fatal(err)
	}
	peer := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5}
	b.Run("certificate", func(b *testing.B) {
		state := &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{c, ca.Cert}}}
		b.ReportAllocs()
		for b.Loop() {
			a.Identify(state, "", peer)
		}
	})
	b.Run("bearer of 20", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			a.Identify(nil, "Bearer s3cret-19", peer)
		}
	})
}

// TestReloadSeesEditInPlace: a token file edited in place to the same
// length, its modification time set back (or within one tick of the file
// system's clock), is reloaded: a revoked secret stops working within a
// second. Found by a red-team review, 2026-11-28: the reload compared
// only the file's time, size and inode.
func TestReloadSeesEditInPlace(t *testing.T) {
	path := tokenFile(t, tokenLines("ops", "s3cret-aaa"))
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	clk := newClock()
	log, _ := newLog()
	a, err := auth.NewAuthenticator(false, path, log, auth.WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Identify(nil, "Bearer s3cret-aaa", nil).Principal; got != "token:ops" {
		t.Fatalf("before the edit: got %q, want token:ops", got)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(tokenLines("ops", "s3cret-bbb")); err != nil { // the same length
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if fi2, _ := os.Stat(path); fi2.Size() != fi.Size() || !fi2.ModTime().Equal(fi.ModTime()) {
		t.Fatalf("the edit changed the stat: size %d → %d, mtime %v → %v", fi.Size(), fi2.Size(), fi.ModTime(), fi2.ModTime())
	}
	clk.advance(2 * time.Second)
	if got := a.Identify(nil, "Bearer s3cret-aaa", nil).Principal; got != "" {
		t.Errorf("the revoked secret after an edit in place: got %q, want refused", got)
	}
	if got := a.Identify(nil, "Bearer s3cret-bbb", nil).Principal; got != "token:ops" {
		t.Errorf("the new secret after an edit in place: got %q, want token:ops", got)
	}
}
