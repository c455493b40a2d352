package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/api/auth"
	"github.com/fencegate/fencegate/proxy/audit"
	"github.com/fencegate/fencegate/proxy/policy"
)

// securityConfig is who may reach fencegate and what they may do: TLS on
// the listeners, the identities callers prove, the policy, the audit log.
type securityConfig struct {
	CertFile      string
	KeyFile       string
	TrustedCAFile string
	TLSMinVersion string
	TokenAuthFile string
	PolicyFile    string
	PolicyMode    string
	AuditLog      string
}

func (c *securityConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.CertFile, "cert-file", c.CertFile, "TLS certificate (PEM) of the gRPC and HTTP listeners; re-read when it changes")
	fs.StringVar(&c.KeyFile, "key-file", c.KeyFile, "TLS key (PEM) of --cert-file")
	fs.StringVar(&c.TrustedCAFile, "trusted-ca-file", c.TrustedCAFile, "CA bundle (PEM) verifying client certificates; when set, every client must present one (mTLS), unless --token-auth-file is set too: then a client shows a certificate or a bearer token")
	fs.StringVar(&c.TLSMinVersion, "tls-min-version", c.TLSMinVersion, "lowest TLS version accepted: 1.2 or 1.3")
	fs.StringVar(&c.TokenAuthFile, "token-auth-file", c.TokenAuthFile, "bearer tokens: lines '<name> <sha256 hex of the secret>'; a caller sending 'Authorization: Bearer <secret>' is token:<name>")
	fs.StringVar(&c.PolicyFile, "policy-file", c.PolicyFile, "who may do what to which fence (YAML, see API.md); anything no rule allows is refused. Re-read on change and SIGHUP")
	fs.StringVar(&c.PolicyMode, "policy-mode", c.PolicyMode, "enforce: refuse what the policy does not allow; shadow: serve it, logging and counting it (fencegate_policy_shadow_denials_total)")
	fs.StringVar(&c.AuditLog, "audit-log", c.AuditLog, "append one JSON line per decision to this file; re-opened on SIGHUP (for logrotate)")
}

func (c *securityConfig) validate() error {
	switch c.PolicyMode {
	case "enforce", "shadow":
	default:
		return fmt.Errorf("--policy-mode %q: want enforce or shadow", c.PolicyMode)
	}
	if c.PolicyMode == "shadow" && c.PolicyFile == "" {
		return errors.New("--policy-mode=shadow needs --policy-file")
	}
	return nil
}

// checkExposure refuses to serve on an address other hosts can reach
// without TLS and a policy: anyone reaching the port would otherwise write
// any fence with a token read from etcd or GET /v1/fences.
func (c *securityConfig) checkExposure(insecure bool, addrs ...[2]string) error {
	if insecure {
		return nil
	}
	for _, a := range addrs {
		flagName, addr := a[0], a[1]
		if addr == "" || isLoopbackAddr(addr) {
			continue
		}
		var missing []string
		if c.CertFile == "" {
			missing = append(missing, "--cert-file")
		}
		if c.PolicyFile == "" {
			missing = append(missing, "--policy-file")
		}
		if len(missing) > 0 {
			return fmt.Errorf("%s %s is reachable from other hosts without %s: set them (see docs/SECURITY.md), listen on loopback, or pass --insecure",
				flagName, addr, strings.Join(missing, " and "))
		}
	}
	return nil
}

// isLoopbackAddr reports whether a listen address only accepts
// connections from this host. An empty host, 0.0.0.0, :: and names other
// than localhost listen beyond it.
func isLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && isLoopback(host)
}

// isLoopback reports whether host is a loopback IP or "localhost".
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// security is what serve builds from securityConfig.
type security struct {
	tls    *auth.ServerTLS     // nil without --cert-file
	authn  *auth.Authenticator // always set; Required() says whether it refuses
	policy *policy.Store       // nil without --policy-file
	audit  *audit.Log          // nil without --audit-log
}

// newSecurity loads the certificates, token file and audit log, each
// failing start-up with one line naming the flag and file; loadPolicy
// follows once the backends are open.
func newSecurity(c securityConfig, log *slog.Logger, reg prometheus.Registerer) (*security, error) {
	s := &security{}
	var err error
	s.tls, err = auth.NewServerTLS(auth.TLSFiles{
		CertFile: c.CertFile, KeyFile: c.KeyFile, TrustedCAFile: c.TrustedCAFile, MinVersion: c.TLSMinVersion,
		ClientCertOptional: c.TokenAuthFile != "",
	}, log, auth.WithRegisterer(reg))
	if err != nil {
		return nil, err
	}
	s.authn, err = auth.NewAuthenticator(c.TrustedCAFile != "", c.TokenAuthFile, log, auth.WithRegisterer(reg))
	if err != nil {
		return nil, err
	}
	if c.AuditLog != "" {
		s.audit, err = audit.Open(c.AuditLog, audit.Options{Logger: log, Registerer: reg})
		if err != nil {
			return nil, fmt.Errorf("--audit-log %s: %w", c.AuditLog, err)
		}
	}
	return s, nil
}

// loadPolicy reads --policy-file, if set. check validates each policy
// loaded, now and on every reload (its roles against the database).
func (s *security) loadPolicy(c securityConfig, log *slog.Logger, reg prometheus.Registerer, check func(*policy.Policy) error) error {
	if c.PolicyFile == "" {
		return nil
	}
	var err error
	s.policy, err = policy.NewStore(c.PolicyFile, policy.StoreOptions{Logger: log, Registerer: reg, Check: check})
	if err != nil {
		return fmt.Errorf("--policy-file %w", err)
	}
	return nil
}

// reload is SIGHUP: certificates, token file and policy are re-read, the
// audit log re-opened (after logrotate moved it). What fails keeps the old
// and is logged by its owner.
func (s *security) reload(log *slog.Logger) {
	log.Info("SIGHUP: reloading certificates, tokens and policy, re-opening the audit log")
	_ = s.tls.Reload()
	_ = s.authn.Reload()
	if s.policy != nil {
		_ = s.policy.Reload()
	}
	if s.audit != nil {
		_ = s.audit.Reopen()
	}
}

func (s *security) close() {
	if s.audit != nil {
		_ = s.audit.Close()
	}
}
