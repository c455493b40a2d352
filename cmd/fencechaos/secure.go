package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/api/auth/authtest"
	"github.com/fencegate/fencegate/migrations"
)

// With --secure (the default) the campaign's gateways serve as a
// deployment should: TLS on both listeners, a client certificate required
// (mTLS), and a policy that lets the workers write their fence and nothing
// else, their SQL running as a NOLOGIN role that may only append to the
// ledger. Everything that talks to a gateway presents a certificate of the
// campaign's own CA. Hostile workers also write as an intruder (a valid
// certificate that no rule lets write the fence) and as a stranger (no
// certificate at all); both must be refused (hostile.go).

// Principals of the campaign's client certificates (their URI SAN).
const (
	workerPrincipal   = "spiffe://chaos/worker"
	campaignPrincipal = "spiffe://chaos/campaign"
	intruderPrincipal = "spiffe://chaos/intruder"
)

// writerRole is the PostgreSQL role the workers' statements run as.
const writerRole = "chaos_writer"

// serverName is the name clients check the gateways' certificate against;
// it is one of its SANs (authtest's Localhost), whatever the resolver calls
// the target.
const serverName = "localhost"

// tlsFiles are PEM files: the CA bundle to trust, and a certificate and
// its key to present (none for the stranger).
type tlsFiles struct {
	CA, Cert, Key string
}

// config is a client TLS config from the files.
func (f tlsFiles) config() (*tls.Config, error) {
	pem, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no certificate", f.CA)
	}
	cfg := &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12}
	if f.Cert != "" {
		pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// args are the worker flags naming the files, with prefix ("" or
// "intruder-").
func (f tlsFiles) args(prefix string) []string {
	if f.CA == "" {
		return nil
	}
	return []string{"--" + prefix + "ca-file", f.CA, "--" + prefix + "cert-file", f.Cert, "--" + prefix + "key-file", f.Key}
}

// pki is the files of a secure campaign.
type pki struct {
	server   tlsFiles // the gateways' certificate; CA verifies client certificates
	worker   tlsFiles
	campaign tlsFiles // the campaign's own: readiness, the other fence's setup
	intruder tlsFiles
	policy   string
}

// newCredentials makes a CA, the gateways' certificate for 127.0.0.1, the
// client certificates, and the policy, under dir.
func (c *campaign) newCredentials(dir string) (*pki, error) {
	var cr *pki
	err := authtest.Make(dir, func(t authtest.T) {
		ca := authtest.NewCA(t, "fencechaos")
		client := func(name, principal string) tlsFiles {
			is := ca.Issue(t, name, authtest.Leaf{CommonName: name, URIs: []string{principal}, Client: true})
			return tlsFiles{CA: ca.File, Cert: is.CertFile, Key: is.KeyFile}
		}
		srv := ca.Localhost(t, "gateway")
		cr = &pki{
			server:   tlsFiles{CA: ca.File, Cert: srv.CertFile, Key: srv.KeyFile},
			worker:   client("worker", workerPrincipal),
			campaign: client("campaign", campaignPrincipal),
			intruder: client("intruder", intruderPrincipal),
			policy:   filepath.Join(dir, "policy.yaml"),
		}
	})
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(cr.policy, []byte(c.policyYAML()), 0o644); err != nil {
		return nil, err
	}
	return cr, nil
}

// policyYAML lets the workers write the fence, the campaign the attacks'
// other fence, and the intruder only a fence of its own: its certificate
// is valid, so refusing it is the policy's doing, fence by fence.
func (c *campaign) policyYAML() string {
	role := ""
	if c.cfg.Backend == "postgres" {
		role = "\n    postgres_role: " + writerRole
	}
	rule := func(name, principal, fence string) string {
		return fmt.Sprintf(`  - name: %s
    principals: [%q]
    fences: [%q]
    actions: [sql.write, redis.write, fence.read]%s
`, name, principal, fence, role)
	}
	return "rules:\n" +
		rule("workers", workerPrincipal, c.cfg.Fence) +
		rule("campaign", campaignPrincipal, c.otherFence()) +
		rule("intruder", intruderPrincipal, c.cfg.Fence+"-intruder")
}

// secureArgs are the gateways' TLS and policy flags.
func (c *campaign) secureArgs() []string {
	if c.creds == nil {
		return nil
	}
	s := c.creds.server
	return []string{"--cert-file=" + s.Cert, "--key-file=" + s.Key, "--trusted-ca-file=" + s.CA, "--policy-file=" + c.creds.policy}
}

// grantWriter creates the workers' role: NOLOGIN, allowed to append to the
// ledger and nothing else, and lets the gateways' login become it
// (fencegate grant).
func grantWriter(ctx context.Context, conn *pgx.Conn, login string) error {
	r := pgx.Identifier{writerRole}.Sanitize()
	for _, sql := range []string{
		"CREATE ROLE " + r + " NOLOGIN",
		"GRANT INSERT ON ledger TO " + r,
		"GRANT USAGE ON SEQUENCE ledger_id_seq TO " + r,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
	}
	return migrations.GrantRole(ctx, conn, login, writerRole)
}

// scheme is the gateways' HTTP scheme.
func (c *campaign) scheme() string {
	if c.creds != nil {
		return "https"
	}
	return "http"
}
