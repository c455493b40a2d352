// Package authtest makes real X.509 certificates for tests: a CA, and
// server and client certificates it signs, written as PEM files the way an
// operator would hand them to fencegate, etcd or Redis.
package authtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// CA is a certificate authority for one test.
type CA struct {
	Cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	CertPEM []byte
	// File is the CA certificate as a PEM file (a trusted CA bundle).
	File string
	dir  string
}

var serial atomic.Int64

// T is the part of testing.TB the helpers use; a command such as
// fencechaos can pass its own.
type T interface {
	Helper()
	Fatal(args ...any)
	TempDir() string
}

// NewCA makes a CA whose files live in t.TempDir().
func NewCA(t T, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{Cert: cert, key: key, CertPEM: pemBlock("CERTIFICATE", der), dir: t.TempDir()}
	ca.File = filepath.Join(ca.dir, name+"-ca.pem")
	if err := os.WriteFile(ca.File, ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return ca
}

// Pool is a cert pool holding the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Leaf is what to put in a certificate. Empty fields are left out.
type Leaf struct {
	CommonName string
	DNSNames   []string
	IPs        []net.IP
	URIs       []string
	// Server and Client set the extended key usages; neither means both.
	Server, Client bool
	// NotAfter defaults to a day from now.
	NotAfter time.Time
}

// Issued is a signed certificate and its key, also as PEM files.
type Issued struct {
	Cert     *x509.Certificate
	CertPEM  []byte
	KeyPEM   []byte
	CertFile string
	KeyFile  string
	TLS      tls.Certificate
}

// Issue signs a certificate for l and writes it as <name>.pem and
// <name>-key.pem beside the CA's file.
func (ca *CA) Issue(t T, name string, l Leaf) *Issued {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: l.CommonName},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     l.NotAfter,
		DNSNames:     l.DNSNames,
		IPAddresses:  l.IPs,
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	if tmpl.NotAfter.IsZero() {
		tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	}
	for _, u := range l.URIs {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	if l.Server || !l.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if l.Client || !l.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	is := &Issued{Cert: cert, CertPEM: pemBlock("CERTIFICATE", der), KeyPEM: pemBlock("PRIVATE KEY", kd)}
	is.TLS, err = tls.X509KeyPair(is.CertPEM, is.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	is.CertFile = filepath.Join(ca.dir, name+".pem")
	is.KeyFile = filepath.Join(ca.dir, name+"-key.pem")
	if err := os.WriteFile(is.CertFile, is.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(is.KeyFile, is.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return is
}

// Localhost is a server certificate for 127.0.0.1, ::1 and localhost.
func (ca *CA) Localhost(t T, name string) *Issued {
	t.Helper()
	return ca.Issue(t, name, Leaf{
		CommonName: name, DNSNames: []string{"localhost"},
		IPs: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, Server: true,
	})
}

// ClientTLS is a client TLS config presenting c (when not nil) and
// trusting ca.
func (ca *CA) ClientTLS(c *Issued) *tls.Config {
	cfg := &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
	if c != nil {
		cfg.Certificates = []tls.Certificate{c.TLS}
	}
	return cfg
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// Make runs build with a T whose files go to dir and whose Fatal ends build,
// returning the failure as an error: certificates for a command
// (fencechaos, fencebench), outside a test.
func Make(dir string, build func(t T)) (err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(makeFailure)
			if !ok {
				panic(r)
			}
			err = fmt.Errorf("certificates: %w", f.err)
		}
	}()
	build(dirT(dir))
	return nil
}

// makeFailure carries a failure out of dirT.Fatal to Make.
type makeFailure struct{ err error }

// dirT is the T of Make.
type dirT string

func (dirT) Helper()           {}
func (d dirT) TempDir() string { return string(d) }
func (dirT) Fatal(args ...any) { panic(makeFailure{errors.New(fmt.Sprint(args...))}) }
