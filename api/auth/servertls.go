package auth

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// TLSFiles are the files and version of the listeners' TLS (etcd's flag
// names: --cert-file, --key-file, --trusted-ca-file, --tls-min-version).
type TLSFiles struct {
	CertFile      string
	KeyFile       string
	TrustedCAFile string // set: a client certificate it signed is required
	// ClientCertOptional, with TrustedCAFile, verifies a client
	// certificate when one is presented but lets a handshake without one
	// through: bearer tokens are another way in, and the pipeline refuses
	// callers with neither (UNAUTHENTICATED).
	ClientCertOptional bool
	MinVersion         string // "1.2" (default) or "1.3"; "TLS1.2", "TLS1.3" too
}

// nextProtos is offered by every handshake: the gRPC listener speaks h2,
// the HTTP one h2 and HTTP/1.1. GetConfigForClient's config is used as
// is, so net/http cannot add these itself.
var nextProtos = []string{"h2", "http/1.1"}

// ServerTLS is the listeners' TLS configuration, serving the certificate,
// key and CA bundle as they are on disk: changed files are loaded for new
// handshakes, without a restart. An open connection keeps its handshake;
// once a reload has taken every CA its client certificate's chains end in
// out of the bundle, the certificate names no one (ChainsInvalid).
type ServerTLS struct {
	min uint16
	r   *reloader[loaded]
}

// loaded is what one load of the files gives the handshakes.
type loaded struct {
	cfg     *tls.Config
	anchors []string // the CA bundle's certificates, DER (anchorsOf)
}

// swapAnchors keeps the process's trust anchors (anchors) those of the
// bundle in force: before the new bundle's handshakes, so that none of
// them is judged by the old one.
func swapAnchors(old, cur *loaded) {
	var was []string
	if old != nil {
		was = old.anchors
	}
	anchors.swap(was, cur.anchors)
}

// NewServerTLS loads f. It returns nil, and no error, when f.CertFile is
// empty: the listeners then serve plain TCP. Any error is one line naming
// the flag and the file.
func NewServerTLS(f TLSFiles, log *slog.Logger, opts ...Option) (*ServerTLS, error) {
	minVer, err := parseMinVersion(f.MinVersion)
	if err != nil {
		return nil, err
	}
	switch {
	case f.CertFile == "" && f.KeyFile != "":
		return nil, fmt.Errorf("--key-file %s: needs --cert-file", f.KeyFile)
	case f.CertFile != "" && f.KeyFile == "":
		return nil, fmt.Errorf("--cert-file %s: needs --key-file", f.CertFile)
	case f.CertFile == "" && f.TrustedCAFile != "":
		return nil, fmt.Errorf("--trusted-ca-file %s: needs --cert-file and --key-file", f.TrustedCAFile)
	case f.CertFile == "":
		return nil, nil
	}
	o := buildOptions(opts)
	s := &ServerTLS{min: minVer}
	load := func() (*loaded, error) {
		if err := o.checkFiles("--cert-file", f.CertFile, "--key-file", f.KeyFile, "--trusted-ca-file", f.TrustedCAFile); err != nil {
			return nil, err
		}
		return loadTLS(f, minVer)
	}
	s.r = &reloader[loaded]{
		files:    []string{f.CertFile, f.KeyFile},
		load:     load,
		now:      o.now,
		log:      orDiscard(log),
		what:     "TLS certificate, key and CA bundle",
		swapping: swapAnchors,
	}
	if f.TrustedCAFile != "" {
		s.r.files = append(s.r.files, f.TrustedCAFile)
	}
	if o.reg != nil {
		errs := prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencegate_tls_reload_errors_total",
			Help: "Changed TLS certificate, key or CA files that could not be loaded; the previous ones stay in use.",
		})
		if err := o.reg.Register(errs); err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
		s.r.errs = errs
	}
	if err := s.r.start(); err != nil {
		return nil, err
	}
	return s, nil
}

// Config is for the listeners (tls.NewListener, grpc credentials.NewTLS).
// Each handshake gets the material current at that moment. Config is nil
// for a nil ServerTLS.
func (s *ServerTLS) Config() *tls.Config {
	if s == nil {
		return nil
	}
	return &tls.Config{
		MinVersion:         s.min,
		NextProtos:         nextProtos,
		GetConfigForClient: s.configForClient,
	}
}

// Reload loads the files again now, changed or not (SIGHUP). On error the
// previous material stays in use.
func (s *ServerTLS) Reload() error {
	if s == nil {
		return nil
	}
	return s.r.reload()
}

func (s *ServerTLS) configForClient(*tls.ClientHelloInfo) (*tls.Config, error) {
	return s.r.get().cfg, nil
}

func parseMinVersion(v string) (uint16, error) {
	switch strings.TrimPrefix(strings.ToUpper(v), "TLS") {
	case "", "1.2":
		return tls.VersionTLS12, nil
	case "1.3":
		return tls.VersionTLS13, nil
	}
	return 0, fmt.Errorf("--tls-min-version %q: want 1.2 or 1.3", v)
}

// loadTLS reads f into the config one handshake uses.
func loadTLS(f TLSFiles, minVer uint16) (*loaded, error) {
	certPEM, err := readFile("--cert-file", f.CertFile)
	if err != nil {
		return nil, err
	}
	if _, err := parseCerts(certPEM); err != nil {
		return nil, fileError("--cert-file", f.CertFile, err)
	}
	keyPEM, err := readFile("--key-file", f.KeyFile)
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fileError("--key-file", f.KeyFile, fmt.Errorf("not the key of --cert-file %s: %w", f.CertFile, err))
	}
	l := &loaded{cfg: &tls.Config{
		MinVersion:   minVer,
		NextProtos:   nextProtos,
		Certificates: []tls.Certificate{pair},
	}}
	if f.TrustedCAFile != "" {
		cfg := l.cfg
		caPEM, err := readFile("--trusted-ca-file", f.TrustedCAFile)
		if err != nil {
			return nil, err
		}
		certs, err := parseCerts(caPEM)
		if err != nil {
			return nil, fileError("--trusted-ca-file", f.TrustedCAFile, err)
		}
		pool := x509.NewCertPool()
		for _, c := range certs {
			pool.AddCert(c)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		if f.ClientCertOptional {
			cfg.ClientAuth = tls.VerifyClientCertIfGiven
		}
		// A resumed session's chain is checked again against this pool by
		// crypto/tls itself, so a ticket does not outlive its CA's removal
		// (TestCABundleRotation); an open connection, by ChainsInvalid.
		l.anchors = anchorsOf(certs)
	}
	return l, nil
}

// errNoCerts is a PEM file without a certificate in it.
var errNoCerts = errors.New("no PEM certificate in it")

// parseCerts parses every CERTIFICATE block of b; other blocks are refused
// so that a key pasted into a certificate file is noticed.
func parseCerts(b []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for n := 1; ; n++ {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("PEM block %d is %q, want CERTIFICATE", n, blk.Type)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("PEM block %d: %w", n, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errNoCerts
	}
	return certs, nil
}
