package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/fencegate/fencegate/proxy/redis"
)

// depsConfig is how serve reaches its dependencies securely: TLS and
// credentials toward etcd (etcdctl's flag names) and Redis. PostgreSQL
// takes both in its DSN (sslmode=verify-full, sslrootcert, sslcert,
// sslkey).
type depsConfig struct {
	EtcdCert, EtcdKey, EtcdCACert string
	EtcdUser, EtcdPassword        string

	RedisUser, RedisPassword string
	RedisTLS                 bool
	RedisCAFile              string
	RedisCertFile            string
	RedisKeyFile             string
	RedisServerName          string
}

func (d *depsConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&d.EtcdCert, "etcd-cert", d.EtcdCert, "client certificate `file` toward etcd (re-read when it changes)")
	fs.StringVar(&d.EtcdKey, "etcd-key", d.EtcdKey, "key `file` of --etcd-cert")
	fs.StringVar(&d.EtcdCACert, "etcd-cacert", d.EtcdCACert, "CA bundle `file` that etcd's server certificate is verified with (default: the system's roots for https:// endpoints)")
	fs.StringVar(&d.EtcdUser, "etcd-user", d.EtcdUser, "etcd user name (etcd auth)")
	fs.StringVar(&d.EtcdPassword, "etcd-password", d.EtcdPassword, "password of --etcd-user; prefer FENCEGATE_ETCD_PASSWORD, which ps does not show")
	fs.StringVar(&d.RedisUser, "redis-user", d.RedisUser, "Redis ACL user (see docs/SECURITY.md for its minimal ACL)")
	fs.StringVar(&d.RedisPassword, "redis-password", d.RedisPassword, "password of --redis-user (or requirepass); prefer FENCEGATE_REDIS_PASSWORD, which ps does not show")
	fs.BoolVar(&d.RedisTLS, "redis-tls", d.RedisTLS, "connect to Redis over TLS, verified with the system's roots unless --redis-tls-ca-file is given (implied by any --redis-tls-* file)")
	fs.StringVar(&d.RedisCAFile, "redis-tls-ca-file", d.RedisCAFile, "CA bundle `file` that Redis's server certificate is verified with")
	fs.StringVar(&d.RedisCertFile, "redis-tls-cert-file", d.RedisCertFile, "client certificate `file` toward Redis (re-read when it changes)")
	fs.StringVar(&d.RedisKeyFile, "redis-tls-key-file", d.RedisKeyFile, "key `file` of --redis-tls-cert-file")
	fs.StringVar(&d.RedisServerName, "redis-tls-server-name", d.RedisServerName, "name Redis's certificate must carry (default: the host of --redis-addr)")
}

// etcdTLS is the TLS config toward etcd, or nil when no TLS flag is set
// (https:// endpoints then use the system's roots).
func (d *depsConfig) etcdTLS() (*tls.Config, error) {
	if d.EtcdCert == "" && d.EtcdKey == "" && d.EtcdCACert == "" {
		return nil, nil
	}
	return clientTLS("--etcd-cacert", d.EtcdCACert, "--etcd-cert", d.EtcdCert, "--etcd-key", d.EtcdKey)
}

// checkEtcdEndpoints refuses what clientv3 would do silently: connect to
// an http:// endpoint in plain text although TLS flags are set, or send
// --etcd-password in plain text to another machine.
func (d *depsConfig) checkEtcdEndpoints(endpoints []string, tlsOn, insecure bool) error {
	for _, ep := range endpoints {
		u, err := url.Parse(ep)
		plain := err == nil && u.Scheme == "http"
		if plain && tlsOn {
			return fmt.Errorf("--etcd-endpoints %s is plain http although --etcd-cert, --etcd-key or --etcd-cacert is set: use https://", ep)
		}
		if !plain && (tlsOn || err == nil && u.Scheme == "https") {
			continue
		}
		host := ep
		if plain {
			host = u.Host
		}
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if d.EtcdPassword != "" && !insecure && !isLoopback(host) {
			return fmt.Errorf("--etcd-password would go in plain text to %s: use https:// endpoints with --etcd-cacert (or --insecure)", ep)
		}
	}
	return nil
}

// redisTLS reports whether the Redis connections use TLS.
func (d *depsConfig) redisTLS() bool {
	return d.RedisTLS || d.RedisCAFile != "" || d.RedisCertFile != "" || d.RedisKeyFile != "" || d.RedisServerName != ""
}

// checkRedisAddrs refuses, as checkEtcdEndpoints does for etcd, to send
// --redis-password in plain text (AUTH, HELLO) to a Redis on another
// machine: addrs are the Redis address flags and their values.
func (d *depsConfig) checkRedisAddrs(insecure bool, addrs ...[2]string) error {
	if d.RedisPassword == "" || d.redisTLS() || insecure {
		return nil
	}
	for _, a := range addrs {
		flagName, addr := a[0], a[1]
		if addr == "" || strings.HasPrefix(addr, "/") || isLoopbackAddr(addr) {
			continue
		}
		return fmt.Errorf("--redis-password would go in plain text to %s %s: use --redis-tls (with --redis-tls-ca-file), a loopback address or a Unix socket (or --insecure)", flagName, addr)
	}
	return nil
}

// applyRedis sets the Redis credentials and TLS flags into c.
func (d *depsConfig) applyRedis(c *redis.Config) error {
	c.Username, c.Password = d.RedisUser, d.RedisPassword
	if !d.redisTLS() {
		return nil
	}
	t, err := clientTLS("--redis-tls-ca-file", d.RedisCAFile, "--redis-tls-cert-file", d.RedisCertFile, "--redis-tls-key-file", d.RedisKeyFile)
	if err != nil {
		return err
	}
	t.ServerName = d.RedisServerName
	c.TLS = t
	return nil
}

// clientTLS is a client TLS config trusting the CA bundle caFile (the
// system's roots when empty) and presenting the certificate in certFile
// and keyFile, if given, re-read when either file changes. The flags'
// names make the errors name what to fix.
func clientTLS(caFlag, caFile, certFlag, certFile, keyFlag, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fileError(caFlag, caFile, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s %s: no PEM certificate in it", caFlag, caFile)
		}
		cfg.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return nil, fmt.Errorf("%s and %s go together: set both or neither", certFlag, keyFlag)
	}
	if certFile != "" {
		kp := &keyPair{certFlag: certFlag, certFile: certFile, keyFlag: keyFlag, keyFile: keyFile}
		if _, err := kp.get(); err != nil {
			return nil, err
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return kp.get() }
	}
	return cfg, nil
}

// fileError names the flag and its file; the operating system's reason
// without the path, which the message already has.
func fileError(flagName, file string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("%s %s: %w", flagName, file, err)
}

// keyPair is a client certificate read from its files again when either
// changes, so a rotated certificate is used from the next connection on,
// without a restart. A pair that does not load (say, a new certificate
// whose key is not written yet) keeps the previous one until the next
// connection tries again.
type keyPair struct {
	certFlag, certFile, keyFlag, keyFile string

	mu                sync.Mutex
	cert              *tls.Certificate
	certStat, keyStat fs.FileInfo
}

func (k *keyPair) get() (*tls.Certificate, error) {
	cs, cerr := os.Stat(k.certFile)
	ks, kerr := os.Stat(k.keyFile)
	k.mu.Lock()
	defer k.mu.Unlock()
	if cerr == nil && kerr == nil && k.cert != nil && sameFile(cs, k.certStat) && sameFile(ks, k.keyStat) {
		return k.cert, nil
	}
	c, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		if k.cert != nil {
			return k.cert, nil
		}
		return nil, k.loadError(err)
	}
	k.cert, k.certStat, k.keyStat = &c, cs, ks
	return k.cert, nil
}

func (k *keyPair) loadError(err error) error {
	var pe *fs.PathError
	switch {
	case errors.As(err, &pe) && pe.Path == k.keyFile:
		return fileError(k.keyFlag, k.keyFile, err)
	case errors.As(err, &pe):
		return fileError(k.certFlag, k.certFile, err)
	}
	return fmt.Errorf("%s %s, %s %s: %s", k.certFlag, k.certFile, k.keyFlag, k.keyFile, strings.TrimPrefix(err.Error(), "tls: "))
}

// sameFile reports whether a file looks unchanged: same modification time
// and size.
func sameFile(a, b fs.FileInfo) bool {
	return b != nil && a.ModTime().Equal(b.ModTime()) && a.Size() == b.Size()
}

// explainEtcd replaces the "context deadline exceeded" that clientv3 gives
// for any failed TLS handshake with the handshake's own error, found by
// one more handshake of its own with each endpoint.
func explainEtcd(ctx context.Context, endpoints []string, cfg *tls.Config, timeout time.Duration, err error) error {
	if !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	for _, ep := range endpoints {
		u, perr := url.Parse(ep)
		if perr != nil || u.Host == "" {
			u = &url.URL{Host: ep}
		}
		if u.Scheme == "http" || (u.Scheme != "https" && cfg == nil) {
			continue
		}
		c := cfg
		if c == nil {
			c = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		if herr := probeTLS(ctx, u.Host, c, timeout); herr != nil {
			return herr
		}
	}
	return err
}

// probeTLS does a TLS handshake with addr and reads once: with TLS 1.3 a
// server refuses the client's certificate only after the client's side of
// the handshake is done.
func probeTLS(ctx context.Context, addr string, cfg *tls.Config, timeout time.Duration) error {
	cfg = cfg.Clone()
	if cfg.ServerName == "" {
		cfg.ServerName, _, _ = net.SplitHostPort(addr)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	d := tls.Dialer{Config: cfg}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := conn.Read(make([]byte, 1)); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	return nil
}

// etcdDenied says who may not read what serve reads at start.
func (d *depsConfig) etcdDenied(endpoints string, err error) error {
	who := "a client without --etcd-user"
	if d.EtcdUser != "" {
		who = fmt.Sprintf("etcd user %q", d.EtcdUser)
	}
	return fmt.Errorf("etcd at %s: %s may not read key \"health\" (grant its role read on it and on --election-prefix): %w", endpoints, who, err)
}
