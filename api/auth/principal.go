package auth

import "crypto/x509"

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
