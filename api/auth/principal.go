package auth

import (
	"crypto/x509"
	"fmt"
	"time"
)

// PrincipalOf names the holder of a verified client certificate (API.md):
// its first URI SAN as is, else "dns:" and its first DNS SAN, else "cn:"
// and its subject common name; empty when it has none of them.
func PrincipalOf(cert *x509.Certificate) string {
	switch {
	case len(cert.URIs) > 0:
		return cert.URIs[0].String()
	case len(cert.DNSNames) > 0:
		return "dns:" + cert.DNSNames[0]
	case cert.Subject.CommonName != "":
		return "cn:" + cert.Subject.CommonName
	}
	return ""
}

// ChainNotAfter is when a handshake's verified chains (each the leaf
// first) stop proving who their leaf names: the latest, over the chains,
// of each one's earliest NotAfter. A listener that fixes a caller's
// identity at login ends the session then.
func ChainNotAfter(chains [][]*x509.Certificate) time.Time {
	var last time.Time
	for _, chain := range chains {
		var t time.Time
		for _, c := range chain {
			if t.IsZero() || c.NotAfter.Before(t) {
				t = c.NotAfter
			}
		}
		if t.After(last) {
			last = t
		}
	}
	return last
}

// ChainsInvalid says why none of chains, verified in a handshake, proves
// any longer who their leaf names at now, or "": the first one's reason.
// A chain does while each of its certificates is valid at now (as
// crypto/x509 decides it) and, if a ServerTLS verified it, the CA it ends
// in is still in that bundle as last reloaded. A certificate may be
// verified through several chains (an old and a renewed issuer). It
// allocates nothing unless it refuses; the listeners call it on every
// request or command.
func ChainsInvalid(chains [][]*x509.Certificate, now time.Time) string {
	first := ""
	for _, chain := range chains {
		why := chainInvalid(chain, now)
		if why == "" {
			return ""
		}
		if first == "" {
			first = why
		}
	}
	return first
}

// chainInvalid says why chain, verified in a handshake, is not valid at
// now (as crypto/x509 decides it) or ends in a CA a reload removed, or "".
func chainInvalid(chain []*x509.Certificate, now time.Time) string {
	for i, c := range chain {
		var why string
		switch {
		case now.After(c.NotAfter):
			why = "expired at " + c.NotAfter.UTC().Format(time.RFC3339)
		case now.Before(c.NotBefore):
			why = "is not valid before " + c.NotBefore.UTC().Format(time.RFC3339)
		case i == len(chain)-1 && anchors.withdrawn(c):
			why = "is no longer in the trusted CA bundle (--trusted-ca-file)"
		default:
			continue
		}
		if i > 0 {
			return fmt.Sprintf("issuer %.64q of the client certificate %s", c.Subject.CommonName, why)
		}
		return "client certificate " + why
	}
	return ""
}
