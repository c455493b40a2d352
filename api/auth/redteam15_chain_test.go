package auth_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net/url"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/auth"
)

// TestRedTeam15CrossSignedChainRefusedWhileValid: certCaller (and the
// listeners' ChainNotAfter) look at VerifiedChains[0] only. A client
// whose intermediate CA was re-issued (the same name and key, a later
// NotAfter: the usual CA renewal, or a cross-sign) and who sends both
// gets two verified chains at the handshake; the first can be the one
// through the certificate that expires first. Once it expires the
// caller is made anonymous with "issuer ... expired", though the
// certificate is still proven by the other chain, as a new handshake
// at that moment decides (x509 Verify succeeds). The doc says "as a new
// handshake decides it"; it does not.
func TestRedTeam15CrossSignedChainRefusedWhileValid(t *testing.T) {
	now := time.Now()
	rootKey := newKey(t)
	root := mkCert(t, &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "root"},
		NotBefore: now.Add(-3 * time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}, nil, rootKey, rootKey)
	interKey := newKey(t)
	inter := func(serial int64, notAfter time.Time) *x509.Certificate {
		return mkCert(t, &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "issuing-ca"},
			NotBefore: now.Add(-3 * time.Hour), NotAfter: notAfter,
			IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
		}, root, interKey, rootKey)
	}
	old := inter(2, now.Add(-time.Hour)) // expired an hour ago
	renewed := inter(3, now.Add(24*time.Hour))
	u, _ := url.Parse("spiffe://prod.example/billing/leader")
	leaf := mkCert(t, &x509.Certificate{
		SerialNumber: big.NewInt(4), Subject: pkix.Name{CommonName: "leader"}, URIs: []*url.URL{u},
		NotBefore: now.Add(-3 * time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, old, newKey(t), interKey)

	roots := x509.NewCertPool()
	roots.AddCert(root)
	inters := x509.NewCertPool()
	inters.AddCert(old) // the order the client sent them in
	inters.AddCert(renewed)
	opts := x509.VerifyOptions{Roots: roots, Intermediates: inters, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}

	// The handshake, two hours ago, when both intermediates were valid:
	// crypto/tls sets VerifiedChains to what Verify returns.
	opts.CurrentTime = now.Add(-2 * time.Hour)
	chains, err := leaf.Verify(opts)
	if err != nil || len(chains) != 2 {
		t.Fatalf("handshake: got %d chains, %v; want 2", len(chains), err)
	}
	if chains[0][1] != old {
		// The order is crypto/x509's; the hole was in the one that
		// puts the old intermediate's chain first.
		chains[0], chains[1] = chains[1], chains[0]
	}
	// A new handshake now: still verified, through the renewed one.
	opts.CurrentTime = time.Time{}
	if _, err := leaf.Verify(opts); err != nil {
		t.Fatalf("a new handshake now: %v; want verified", err)
	}

	a, err := auth.NewAuthenticator(true, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	state := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf, old, renewed}, VerifiedChains: chains}
	c := a.Identify(state, "", nil)
	if c == nil || c.Principal != u.String() {
		var got, why string
		if c != nil {
			got, why = c.Principal, c.AuthError
		}
		t.Errorf("an open connection whose certificate a new handshake verifies: got principal %q (AuthError %q), want %q", got, why, u)
	}
	if got := auth.ChainNotAfter(chains); got.Before(now) {
		t.Errorf("ChainNotAfter(VerifiedChains) = %v, in the past: a pgwire or RESP session with this certificate is ended at once", got)
	}
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func mkCert(t *testing.T, tmpl, parent *x509.Certificate, key, parentKey *ecdsa.PrivateKey) *x509.Certificate {
	t.Helper()
	if parent == nil {
		parent = tmpl
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
