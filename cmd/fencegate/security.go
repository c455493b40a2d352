package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
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
	// fileCheck judges each file above before it is read, at start and
	// at every reload (checkFileMode).
	fileCheck func(flag, path string) error
}

// newSecurity loads the certificates, token file and audit log, each
// failing start-up with one line naming the flag and file; loadPolicy
// follows once the backends are open. insecure lets files others may
// change through, with a warning.
func newSecurity(c securityConfig, insecure bool, log *slog.Logger, reg prometheus.Registerer) (*security, error) {
	s := &security{fileCheck: func(flagName, path string) error {
		err := checkFileMode(flagName, path)
		if err != nil && insecure {
			log.Warn("using a file others may change or read, as --insecure allows", "err", err)
			return nil
		}
		return err
	}}
	var err error
	s.tls, err = auth.NewServerTLS(auth.TLSFiles{
		CertFile: c.CertFile, KeyFile: c.KeyFile, TrustedCAFile: c.TrustedCAFile, MinVersion: c.TLSMinVersion,
		ClientCertOptional: c.TokenAuthFile != "",
	}, log, auth.WithRegisterer(reg), auth.WithFileCheck(s.fileCheck))
	if err != nil {
		return nil, err
	}
	s.authn, err = auth.NewAuthenticator(c.TrustedCAFile != "", c.TokenAuthFile, log, auth.WithRegisterer(reg), auth.WithFileCheck(s.fileCheck))
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
	s.policy, err = policy.NewStore(c.PolicyFile, policy.StoreOptions{
		Logger: log, Registerer: reg, Check: check,
		FileCheck: func(path string) error { return s.fileCheck("--policy-file", path) },
	})
	var me *fileModeError
	if errors.As(err, &me) {
		return err // names the flag already
	}
	if err != nil {
		return fmt.Errorf("--policy-file %w", err)
	}
	return nil
}

// checkFileMode refuses a file that decides whom fencegate trusts when
// users other than root and fencegate's own may change it, as sshd's
// StrictModes does: the file writable by group or others, or owned by
// another user; or a directory the path's resolution looks in (parentDirs:
// links met half way included) where group or others may write without
// the sticky bit, or owned by another user: anyone of them could
// add a token, a rule or a CA, or rename a file of their own over it.
// The private key (--key-file) may not be read by others either. A
// directory on a file system mounted read-only (a Kubernetes ConfigMap's,
// mode 0777) cannot be written, whatever its mode (checkDir). A file that cannot be
// stat'ed is the read's to report.
func checkFileMode(flagName, path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return nil
	}
	perm := fi.Mode().Perm()
	e := &fileModeError{flag: flagName, path: path, perm: perm, fix: "go-w", owner: -1}
	if flagName == "--key-file" {
		e.fix = "g-w,o-rwx"
	}
	switch {
	case perm&0o022 != 0:
		return e
	case e.fix != "go-w" && perm&0o007 != 0:
		e.readable = true
		return e
	}
	if uid, ok := fileOwner(fi); ok && !trustedOwner(uid) {
		e.owner = int64(uid)
		return e
	}
	for _, dir := range parentDirs(path) {
		if err := checkDir(e, dir); err != nil {
			return err
		}
	}
	return nil
}

// checkDir refuses dir, a directory on the way to e.path, as e when others
// than root and fencegate's user may rename files in it: its owner, or
// anyone its mode lets write without the sticky bit. A read-only mount
// excuses the mode (a Kubernetes ConfigMap volume is 0777), not the owner,
// who may write the directory by another path (a read-only bind mount of
// it).
func checkDir(e *fileModeError, dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil
	}
	e.dir, e.perm = dir, fi.Mode().Perm()
	if uid, ok := fileOwner(fi); ok && !trustedOwner(uid) {
		e.owner = int64(uid)
		return e
	}
	if e.perm&0o022 != 0 && fi.Mode()&fs.ModeSticky == 0 && !onReadOnlyFS(dir) {
		return e
	}
	return nil
}

// maxLinks bounds the symbolic links parentDirs follows, as the kernel's
// ELOOP does.
const maxLinks = 40

// parentDirs returns every directory the kernel looks a name up in to
// resolve path: those of the path as given, of each symbolic link met on
// the way (whoever may write a link's directory may replace the link,
// between fencegate's check and its read of the file), and of the link's
// target, with each ".." taken after the links before it, as the kernel
// takes it (filepath.Abs would take "conf/.." away as text, where conf is
// a link). A name that does not resolve ends the walk: the read fails.
func parentDirs(path string) []string {
	if !filepath.IsAbs(path) {
		wd, err := os.Getwd()
		if err != nil {
			return nil
		}
		path = wd + "/" + path
	}
	var dirs []string
	seen := map[string]bool{}
	cur := "/" // resolved so far: no links, no ".."
	comps := strings.Split(path, "/")
	for links := 0; len(comps) > 0; {
		c := comps[0]
		comps = comps[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		if !seen[cur] {
			seen[cur] = true
			dirs = append(dirs, cur)
		}
		next := filepath.Join(cur, c)
		fi, err := os.Lstat(next)
		if err != nil {
			return dirs
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		target, err := os.Readlink(next)
		if links++; err != nil || links > maxLinks {
			return dirs
		}
		if filepath.IsAbs(target) {
			cur = "/"
		}
		comps = append(strings.Split(target, "/"), comps...)
	}
	return dirs
}

// trustedOwner says whether a file owned by uid is root's or fencegate's.
func trustedOwner(uid uint32) bool {
	return uid == 0 || int(uid) == os.Geteuid()
}

// fileModeError is a file checkFileMode refuses.
type fileModeError struct {
	flag, path string
	dir        string // the directory at fault; "" for the file itself
	perm       fs.FileMode
	owner      int64 // the untrusted owner at fault; -1 for a mode
	readable   bool  // a secret others may read (else: others may write it)
	fix        string
}

func (e *fileModeError) Error() string {
	subject, what, target := fmt.Sprintf("%s %s is", e.flag, e.path), "change what fencegate trusts", e.path
	if e.dir != "" {
		subject, what, target = fmt.Sprintf("%s %s is in %s,", e.flag, e.path, e.dir), "replace the file", e.dir
	}
	if e.owner >= 0 {
		trusted := "root"
		if os.Geteuid() != 0 {
			trusted = "root or fencegate's user, " + userName(int64(os.Geteuid()))
		}
		return fmt.Sprintf("%s owned by %s, not by %s, who could %s: chown %d %s", subject, userName(e.owner), trusted, what, os.Geteuid(), target)
	}
	if e.readable {
		return fmt.Sprintf("%s readable by others (mode %04o), and it is a private key: chmod %s %s", subject, uint32(e.perm), e.fix, target)
	}
	who := "group and others"
	switch e.perm & 0o022 {
	case 0o020:
		who = "group"
	case 0o002:
		who = "others"
	}
	if e.dir != "" {
		return fmt.Sprintf("%s writable by %s without the sticky bit (mode %04o), who could %s: chmod go-w %s", subject, who, uint32(e.perm), what, target)
	}
	return fmt.Sprintf("%s writable by %s (mode %04o), who could %s: chmod %s %s", subject, who, uint32(e.perm), what, e.fix, target)
}

// userName is "uid N", with the user's name when this host knows it.
func userName(uid int64) string {
	id := strconv.FormatInt(uid, 10)
	if u, err := user.LookupId(id); err == nil {
		return u.Username + " (uid " + id + ")"
	}
	return "uid " + id
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
