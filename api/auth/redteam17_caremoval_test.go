package auth_test

import (
	"net/http"
	"net/http/httptrace"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/fencegate/fencegate/api/auth"
	"github.com/fencegate/fencegate/api/auth/authtest"
)

// TestRedTeam17RemovedCAStillNamesCallerOnOpenConnections: the operator
// removes a CA from --trusted-ca-file (it was compromised, or its
// clients are retired) and sends SIGHUP. New handshakes with a
// certificate of that CA are refused (TestCABundleRotation), but a gRPC
// connection or an HTTP keep-alive connection opened before the reload
// goes on naming its caller by that CA's certificate, request after
// request, for as long as the client keeps it open (gRPC's: days).
// certCaller re-checks the chain's dates against time.Now "as a new
// handshake decides it", but never against the CA bundle in force. A
// deny rule cannot stand in for the removal: the same principal
// (spiffe://…/billing/leader) is what the new CA issues to the real
// worker. Expected: once the bundle no longer holds the chain's root, a
// request on an already-open connection names nobody (anonymous,
// AuthError set), as a new handshake would refuse it.
func TestRedTeam17RemovedCAStillNamesCallerOnOpenConnections(t *testing.T) {
	srvCA := authtest.NewCA(t, "rt17-server")
	oldCA, newCA := authtest.NewCA(t, "rt17-old"), authtest.NewCA(t, "rt17-new")
	srv := srvCA.Localhost(t, "srv")
	const who = "spiffe://prod.example/billing/leader"
	mallory := oldCA.Issue(t, "mallory", authtest.Leaf{URIs: []string{who}, Client: true})
	f := tlsFiles(t, srv.CertPEM, srv.KeyPEM, oldCA.CertPEM)
	log, _ := newLog()
	st, err := auth.NewServerTLS(f, log)
	if err != nil {
		t.Fatal(err)
	}
	a, err := auth.NewAuthenticator(true, "", log)
	if err != nil {
		t.Fatal(err)
	}
	grpcAddr, httpAddr := startGRPC(t, st, a), startHTTP(t, st, a)

	// Open connections, while the old CA is trusted.
	gc := dialGRPC(t, grpcAddr, srvCA.ClientTLS(mallory))
	if got, err := gc.check(t, metadata.MD{}); err != nil || got.principal != who {
		t.Fatalf("control, gRPC before the reload: got %q (%v), want %q", got.principal, err, who)
	}
	tr := &http.Transport{TLSClientConfig: srvCA.ClientTLS(mallory), MaxConnsPerHost: 1, IdleConnTimeout: time.Minute}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	if got, _, err := httpGet(t, hc, httpAddr); err != nil || got.principal != who {
		t.Fatalf("control, HTTP before the reload: got %q (%v), want %q", got.principal, err, who)
	}

	// The operator replaces the bundle and sends SIGHUP.
	install(t, f.TrustedCAFile, newCA.CertPEM)
	if err := st.Reload(); err != nil {
		t.Fatalf("reload: %v", err)
	}
	// Control: a new handshake with the old CA's certificate is refused.
	fresh := httpClient(t, srvCA.ClientTLS(mallory))
	if got, _, err := httpGet(t, fresh, httpAddr); err == nil {
		t.Fatalf("control: a new connection after the reload: got principal %q, want the handshake refused", got.principal)
	}

	// The connections opened before the reload.
	if got, err := gc.check(t, metadata.MD{}); err == nil && got.principal != "" {
		t.Errorf("HOLE: gRPC connection opened before the CA was removed from --trusted-ca-file: after the reload got principal %q, want anonymous (the CA that verified it is no longer trusted)", got.principal)
	}
	if got, err := gc.watch(t, metadata.MD{}); err == nil && got.principal != "" {
		t.Errorf("HOLE: gRPC stream on a connection opened before the CA was removed: got principal %q, want anonymous", got.principal)
	}
	reused := false
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused },
	}), http.MethodGet, "https://"+httpAddr+"/echo", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err == nil {
		_ = resp.Body.Close()
		if !reused {
			t.Fatalf("control: the HTTP request after the reload did not reuse the keep-alive connection")
		}
		if p := resp.Header.Get(hdrPrincipal); resp.StatusCode == http.StatusOK && p != "" {
			t.Errorf("HOLE: HTTP keep-alive connection opened before the CA was removed from --trusted-ca-file: after the reload got principal %q, want anonymous", p)
		}
	}
}
