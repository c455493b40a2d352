package api_test

import (
	"net/http"
	"testing"
	"time"
)

// TestRedTeam12ExpiredCertKeepsIdentityOnOpenConnection: SECURITY.md
// ("Revocation") has no CRL or OCSP and tells operators to "issue
// short-lived client certificates": expiry is the revocation. But a
// certificate's validity is checked once, in the handshake, and the
// principal is taken from the handshake's VerifiedChains on every
// request after it (auth.Authenticator.certCaller). A worker that keeps
// its gRPC connection (as gRPC clients do, for days) or an HTTP keep-alive
// connection busy goes on writing as its principal after its certificate
// expired. Safe outcome: a request is identified only by a certificate
// valid when the request arrives; after NotAfter it is UNAUTHENTICATED.
func TestRedTeam12ExpiredCertKeepsIdentityOnOpenConnection(t *testing.T) {
	e := startRT(t, `rules:
  - name: writer
    principals: ["spiffe://rt/@/writer"]
    fences: ["@-a"]
    actions: [sql.write]
    postgres_role: @_a_writer
`)
	e.role(t, e.id+"_a_writer", false)
	fence := e.id + "-a"
	tok := e.lead(t, fence)

	// A certificate valid for a few more seconds (x509 keeps whole
	// seconds: it expires within (5 s, 6 s]).
	notAfter := time.Now().Add(6 * time.Second)
	short := e.cert(t, "writer", rtLeaf{URIs: []string{"spiffe://rt/" + e.id + "/writer"}, NotAfter: notAfter})
	gc := e.grpcClient(t, e.clientTLS(short))
	hc := e.httpClient(t, e.clientTLS(short))
	u := "https://" + e.httpAddr + "/v1/fences/" + fence + "/sql"
	body := `{"statements":[{"sql":"SELECT 1"}]}`

	// Controls, while the certificate is valid: both connections open.
	if _, err := rtExec(t.Context(), gc, fence, tok); err != nil {
		t.Fatalf("control: gRPC with the valid certificate: %v", err)
	}
	if code, reason := rtHTTP(t, hc, http.MethodPost, u, body, "Fencing-Token", tok); code != http.StatusOK {
		t.Fatalf("control: HTTP with the valid certificate: %d %s", code, reason)
	}

	time.Sleep(time.Until(notAfter) + 1500*time.Millisecond)

	// Control: the certificate is expired; a new connection is refused.
	fresh := e.httpClient(t, e.clientTLS(short))
	if code, reason := rtHTTP(t, fresh, http.MethodPost, u, body, "Fencing-Token", tok); code == http.StatusOK {
		t.Fatalf("control: a new connection with the expired certificate got 200 (%s)", reason)
	}

	// The open connections still write as the certificate's principal.
	if _, err := rtExec(t.Context(), gc, fence, tok); err == nil || rtReason(err) != "UNAUTHENTICATED" {
		t.Errorf("HOLE: gRPC, connection opened before the client certificate expired: got %q (err %v), want UNAUTHENTICATED",
			rtReason(err), err)
	}
	if code, reason := rtHTTP(t, hc, http.MethodPost, u, body, "Fencing-Token", tok); code != http.StatusUnauthorized {
		t.Errorf("HOLE: HTTP keep-alive, connection opened before the client certificate expired: got %d %q, want 401 UNAUTHENTICATED",
			code, reason)
	}
}
