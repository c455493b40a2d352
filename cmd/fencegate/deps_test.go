package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/api/auth/authtest"
	"github.com/fencegate/fencegate/election/embedded"
	redisthrowaway "github.com/fencegate/fencegate/proxy/redis/throwaway"
)

// serveUntilUp runs `fencegate serve` with args and env until it logs that
// it serves (then stops it and returns its exit error) or fails.
func serveUntilUp(t *testing.T, args []string, env map[string]string) error {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr syncBuffer
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, append([]string{"serve", "--grpc-addr=127.0.0.1:0", "--http-addr=127.0.0.1:0"}, args...), &stdout, &stderr)
	}()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-errc:
			return err
		default:
		}
		if strings.Contains(stderr.String(), "fencegate serving") {
			cancel()
			return <-errc
		}
	}
	t.Fatalf("serve %v: neither served nor failed\n%s", args, stderr.String())
	return nil
}

// TestDepsServe starts serve against an etcd that serves only TLS, wants a
// client certificate and has auth on, and a Redis that serves only TLS,
// wants a client certificate and has no default user: serve starts with
// the right files and credentials, and without any one of them fails at
// start with one line saying what is wrong.
func TestDepsServe(t *testing.T) {
	ca := authtest.NewCA(t, "deps")
	other := authtest.NewCA(t, "other")
	etcdCert := ca.Localhost(t, "etcd-server")
	redisCert := ca.Localhost(t, "redis-server")
	// Not an etcd user's name: with client-cert-auth, etcd would take the
	// common name as the user when no password is given.
	client := ca.Issue(t, "fencegate-client", authtest.Leaf{CommonName: "fencegate-client", Client: true})

	etcd, err := embedded.Start(t.Context(), embedded.Config{
		Dir: t.TempDir(), NoFsync: true,
		ClientTLS: &embedded.ClientTLS{
			CertFile: etcdCert.CertFile, KeyFile: etcdCert.KeyFile,
			TrustedCAFile: ca.File, ClientCertAuth: true,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	enableEtcdAuth(t, etcd.Endpoints(), ca, client)

	rd, err := redisthrowaway.Start(t.Context(), redisthrowaway.Options{
		TLS:   &redisthrowaway.TLSOptions{CertFile: redisCert.CertFile, KeyFile: redisCert.KeyFile, CAFile: ca.File, AuthClients: true},
		Users: []string{"default off", "fencegate on >redis-pw ~* &* +@all"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()

	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	https := etcd.ClientURL()
	plain := strings.Replace(https, "https://", "http://", 1)
	etcdOK := []string{
		"--etcd-endpoints=" + https, "--etcd-cacert=" + ca.File, "--etcd-cert=" + client.CertFile, "--etcd-key=" + client.KeyFile,
		"--etcd-user=fencegate", "--etcd-dial-timeout=10s",
	}
	redisOK := []string{
		"--redis-addr=" + rd.Addr(), "--redis-tls-ca-file=" + ca.File, "--redis-tls-cert-file=" + client.CertFile,
		"--redis-tls-key-file=" + client.KeyFile, "--redis-user=fencegate",
	}
	okEnv := map[string]string{"FENCEGATE_ETCD_PASSWORD": "etcd-pw", "FENCEGATE_REDIS_PASSWORD": "redis-pw"}
	// with is etcdOK and redisOK with each of change's flags replacing the
	// flag of its name (or removing it, when it is just "--name").
	with := func(change ...string) []string {
		out := append(append([]string{}, etcdOK...), redisOK...)
		for _, c := range change {
			name, _, _ := strings.Cut(c, "=")
			kept := out[:0]
			for _, a := range out {
				if n, _, _ := strings.Cut(a, "="); n != name {
					kept = append(kept, a)
				}
			}
			out = kept
			if strings.Contains(c, "=") {
				out = append(out, c)
			}
		}
		return out
	}

	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string // in the error; "" to serve
	}{
		{"all set", with(), okEnv, ""},
		{"passwords as flags", with("--etcd-password=etcd-pw", "--redis-password=redis-pw"), nil, ""},
		{"wrong etcd password", with(), map[string]string{"FENCEGATE_ETCD_PASSWORD": "wrong", "FENCEGATE_REDIS_PASSWORD": "redis-pw"}, "authentication failed"},
		{"no etcd user", with("--etcd-user"), okEnv, "a client without --etcd-user may not read key \"health\""},
		{"no etcd client certificate", with("--etcd-cert", "--etcd-key", "--etcd-dial-timeout=2s"), okEnv, "certificate required"},
		{"etcd CA not given", with("--etcd-cacert", "--etcd-dial-timeout=2s"), okEnv, "certificate signed by unknown authority"},
		{"etcd CA of another", with("--etcd-cacert="+other.File, "--etcd-dial-timeout=2s"), okEnv, "certificate signed by unknown authority"},
		{"plain etcd endpoint", with("--etcd-endpoints=" + plain), okEnv, "--etcd-endpoints " + plain + " is plain http although"},
		{"etcd CA missing", with("--etcd-cacert=" + missing), okEnv, "--etcd-cacert " + missing + ": no such file or directory"},
		{"etcd CA garbage", with("--etcd-cacert=" + garbage), okEnv, "--etcd-cacert " + garbage + ": no PEM certificate in it"},
		{"etcd cert garbage", with("--etcd-cert=" + garbage), okEnv, "--etcd-cert " + garbage + ", --etcd-key " + client.KeyFile + ": failed to find any PEM data"},
		{"etcd key missing", with("--etcd-key=" + missing), okEnv, "--etcd-key " + missing + ": no such file or directory"},
		{"etcd cert without key", with("--etcd-key"), okEnv, "--etcd-cert and --etcd-key go together"},
		{"etcd key of another cert", with("--etcd-key=" + etcdCert.KeyFile), okEnv, "private key does not match public key"},
		{"wrong redis password", with(), map[string]string{"FENCEGATE_ETCD_PASSWORD": "etcd-pw", "FENCEGATE_REDIS_PASSWORD": "wrong"}, "WRONGPASS"},
		{"no redis user", with("--redis-user"), okEnv, "WRONGPASS"},
		{"no redis client certificate", with("--redis-tls-cert-file", "--redis-tls-key-file"), okEnv, "redis: cannot reach " + rd.Addr()},
		{"redis without TLS", with("--redis-tls-cert-file", "--redis-tls-key-file", "--redis-tls-ca-file"), okEnv, "is it a TLS port?"},
		{"redis TLS, system roots", with("--redis-tls-cert-file", "--redis-tls-key-file", "--redis-tls-ca-file", "--redis-tls=true"), okEnv, "certificate signed by unknown authority"},
		{"redis server name", with("--redis-tls-server-name=redis.example"), okEnv, "not redis.example"},
		{"redis CA missing", with("--redis-tls-ca-file=" + missing), okEnv, "--redis-tls-ca-file " + missing + ": no such file or directory"},
		{"redis key alone", with("--redis-tls-cert-file"), okEnv, "--redis-tls-cert-file and --redis-tls-key-file go together"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := serveUntilUp(t, tc.args, tc.env)
			t.Logf("serve: %v", err)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("got %v, want to serve", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			case err != nil && strings.Contains(err.Error(), "\n"):
				t.Errorf("got error %q, want one line", err)
			}
		})
	}
}

// enableEtcdAuth turns etcd auth on with a root user and a user fencegate
// (password etcd-pw) that may read only what serve reads: the elections
// and the key its readiness check counts.
func enableEtcdAuth(t *testing.T, endpoints []string, ca *authtest.CA, client *authtest.Issued) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: ca.ClientTLS(client), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := t.Context()
	prefix := defaultServeConfig().ElectionPrefix + "/"
	steps := []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", "root-pw"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.RoleAdd(ctx, "fencegate"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "fencegate", prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermRead))
			return err
		},
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "fencegate", "health", "", clientv3.PermissionType(clientv3.PermRead))
			return err
		},
		func() error { _, err := cli.UserAdd(ctx, "fencegate", "etcd-pw"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "fencegate", "fencegate"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("etcd auth setup step %d: %v", i, err)
		}
	}
}

// TestDepsClientCertRotates: the client certificate toward etcd and Redis
// is read again when its files change, and a pair that does not load yet
// (the certificate written, its key not) keeps the previous one.
func TestDepsClientCertRotates(t *testing.T) {
	ca := authtest.NewCA(t, "rotate")
	first := ca.Issue(t, "first", authtest.Leaf{CommonName: "first", Client: true})
	second := ca.Issue(t, "second", authtest.Leaf{CommonName: "second", Client: true})
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	write := func(file string, data []byte, mod time.Time) {
		t.Helper()
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
		// Distinct times: a rotation within the file system's time
		// granularity must still be seen (the size differs too, not always).
		if err := os.Chtimes(file, mod, mod); err != nil {
			t.Fatal(err)
		}
	}
	base := time.Now().Add(-time.Hour)
	write(certFile, first.CertPEM, base)
	write(keyFile, first.KeyPEM, base)
	d := depsConfig{EtcdCert: certFile, EtcdKey: keyFile}
	cfg, err := d.etcdTLS()
	if err != nil {
		t.Fatal(err)
	}
	cn := func() string {
		t.Helper()
		c, err := cfg.GetClientCertificate(&tls.CertificateRequestInfo{})
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return leaf.Subject.CommonName
	}
	steps := []struct {
		name string
		do   func()
		want string
	}{
		{"at start", func() {}, "first"},
		{"new certificate, old key", func() { write(certFile, second.CertPEM, base.Add(time.Minute)) }, "first"},
		{"new key too", func() { write(keyFile, second.KeyPEM, base.Add(time.Minute)) }, "second"},
		{"key file removed", func() { _ = os.Remove(keyFile) }, "second"},
	}
	for _, st := range steps {
		st.do()
		if got := cn(); got != st.want {
			t.Errorf("%s: got certificate %q, want %q", st.name, got, st.want)
		}
	}
}

// TestDepsEtcdEndpointsRefused: what clientv3 would do without a word, a
// plain connection despite TLS flags or a password in plain text to
// another machine, is refused.
func TestDepsEtcdEndpointsRefused(t *testing.T) {
	tests := []struct {
		endpoint string
		tls      bool
		password string
		insecure bool
		want     string // in the error; "" for none
	}{
		{"http://10.0.0.1:2379", true, "", false, "is plain http although"},
		{"https://10.0.0.1:2379", true, "pw", false, ""},
		{"10.0.0.1:2379", true, "pw", false, ""},
		{"https://10.0.0.1:2379", false, "pw", false, ""},
		{"http://10.0.0.1:2379", false, "pw", false, "--etcd-password would go in plain text to http://10.0.0.1:2379"},
		{"10.0.0.1:2379", false, "pw", false, "--etcd-password would go in plain text to 10.0.0.1:2379"},
		{"http://10.0.0.1:2379", false, "pw", true, ""},
		{"http://127.0.0.1:2379", false, "pw", false, ""},
		{"localhost:2379", false, "pw", false, ""},
		{"http://10.0.0.1:2379", false, "", false, ""},
	}
	for _, tc := range tests {
		d := depsConfig{EtcdPassword: tc.password}
		err := d.checkEtcdEndpoints([]string{tc.endpoint}, tc.tls, tc.insecure)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s (tls %v, password %q, insecure %v): got %v, want %q", tc.endpoint, tc.tls, tc.password, tc.insecure, err, tc.want)
		}
	}
}
