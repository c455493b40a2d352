package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/api/auth/authtest"
	"github.com/fencegate/fencegate/proxy/policy"
)

func TestCheckFileMode(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		flag string
		mode os.FileMode
		want string // "" for no error, else a substring
	}{
		{"--policy-file", 0o600, ""},
		{"--policy-file", 0o644, ""},
		{"--policy-file", 0o444, ""},
		{"--policy-file", 0o666, "--policy-file " + dir + "/f is writable by group and others (mode 0666)"},
		{"--token-auth-file", 0o664, "is writable by group (mode 0664)"},
		{"--token-auth-file", 0o646, "is writable by others (mode 0646)"},
		{"--trusted-ca-file", 0o662, "chmod go-w " + dir + "/f"},
		{"--cert-file", 0o644, ""},
		{"--key-file", 0o600, ""},
		{"--key-file", 0o640, ""},
		{"--key-file", 0o644, "--key-file " + dir + "/f is readable by others (mode 0644), and it is a private key: chmod g-w,o-rwx " + dir + "/f"},
		{"--key-file", 0o660, "writable by group (mode 0660)"},
	} {
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, tc.mode); err != nil {
			t.Fatal(err)
		}
		err := checkFileMode(tc.flag, p)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s %04o: got %v, want no error", tc.flag, tc.mode, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s %04o: got %v, want an error containing %q", tc.flag, tc.mode, err, tc.want)
		}
	}
	if err := checkFileMode("--policy-file", filepath.Join(dir, "missing")); err != nil {
		t.Errorf("missing file: got %v, want nil (the read reports it)", err)
	}
}

// TestAuthFilesOthersMayWrite: the token and policy files, and the server
// key, are refused at start when others may write them (the key: read
// it), unless --insecure; a reload of a file others may write keeps the
// previous one, and the file is taken once its mode is fixed.
func TestAuthFilesOthersMayWrite(t *testing.T) {
	dir := t.TempDir()
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	tokens := filepath.Join(dir, "tokens")
	pol := filepath.Join(dir, "policy.yaml")
	const rules = "rules:\n  - name: ops\n    principals: [\"token:ops\"]\n    fences: [\"*\"]\n    actions: [fence.read]\n"
	write := func(path, content string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
	}
	start := func(c securityConfig, insecure bool) (*security, *bytes.Buffer, error) {
		t.Helper()
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, nil))
		reg := prometheus.NewRegistry()
		sec, err := newSecurity(c, insecure, log, reg)
		if err != nil {
			return nil, &buf, err
		}
		t.Cleanup(sec.close)
		return sec, &buf, sec.loadPolicy(c, log, reg, nil)
	}
	cfg := securityConfig{TokenAuthFile: tokens, PolicyFile: pol, PolicyMode: "enforce"}

	t.Run("refused at start", func(t *testing.T) {
		for _, f := range []string{tokens, pol} {
			write(tokens, "ops "+sum("ops-secret")+"\n", 0o600)
			write(pol, rules, 0o644)
			if err := os.Chmod(f, 0o666); err != nil {
				t.Fatal(err)
			}
			_, _, err := start(cfg, false)
			if err == nil || !strings.Contains(err.Error(), f+" is writable by group and others (mode 0666)") || !strings.Contains(err.Error(), "chmod go-w") {
				t.Errorf("%s 0666: got %v, want a refusal naming it, its mode and chmod go-w", f, err)
			}
			if err != nil && strings.Count(err.Error(), "--policy-file") > 1 {
				t.Errorf("got %q, want the flag named once", err)
			}
			_, log, err := start(cfg, true)
			if err != nil || !strings.Contains(log.String(), "level=WARN") || !strings.Contains(log.String(), "writable by group and others") {
				t.Errorf("%s 0666 with --insecure: got %v, want a start with a warning; log:\n%s", f, err, log)
			}
		}
	})

	t.Run("server key readable by others", func(t *testing.T) {
		ca := authtest.NewCA(t, "opsec")
		srv := ca.Localhost(t, "server")
		if err := os.Chmod(srv.KeyFile, 0o644); err != nil {
			t.Fatal(err)
		}
		c := securityConfig{CertFile: srv.CertFile, KeyFile: srv.KeyFile, TrustedCAFile: ca.File, TLSMinVersion: "1.2", PolicyMode: "enforce"}
		if _, _, err := start(c, false); err == nil || !strings.Contains(err.Error(), "--key-file "+srv.KeyFile+" is readable by others (mode 0644)") {
			t.Errorf("key 0644: got %v, want a refusal naming --key-file", err)
		}
		if err := os.Chmod(srv.KeyFile, 0o640); err != nil {
			t.Fatal(err)
		}
		if _, _, err := start(c, false); err != nil {
			t.Errorf("key 0640: got %v, want it taken", err)
		}
	})

	t.Run("reload refused", func(t *testing.T) {
		write(tokens, "ops "+sum("ops-secret")+"\n", 0o600)
		write(pol, rules, 0o644)
		sec, log, err := start(cfg, false)
		if err != nil {
			t.Fatal(err)
		}
		// Anyone appends a token and a rule of their own.
		write(tokens, "ops "+sum("ops-secret")+"\nevil "+sum("evil-secret")+"\n", 0o666)
		write(pol, rules+"  - name: evil\n    principals: [\"token:evil\"]\n    fences: [\"*\"]\n    actions: [sql.write]\n", 0o666)
		sec.reload(slog.New(slog.DiscardHandler))
		if c := sec.authn.Identify(nil, "Bearer evil-secret", nil); c.Principal != "" {
			t.Errorf("after a reload of the 0666 token file: got principal %q, want none", c.Principal)
		}
		if got := sec.policy.Decide("token:evil", "jobs", policy.ActionSQLWrite); got.Allowed {
			t.Errorf("after a reload of the 0666 policy file: token:evil may sql.write")
		}
		for _, want := range []string{"token file not reloaded", "policy: reload failed", "writable by group and others"} {
			if !strings.Contains(log.String(), want) {
				t.Errorf("log has no %q:\n%s", want, log)
			}
		}
		// Fixed by chmod alone: taken at the next reload.
		for _, f := range []string{tokens, pol} {
			if err := os.Chmod(f, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		sec.reload(slog.New(slog.DiscardHandler))
		if c := sec.authn.Identify(nil, "Bearer evil-secret", nil); c.Principal != "token:evil" {
			t.Errorf("after chmod go-w and a reload: got principal %q, want token:evil", c.Principal)
		}
		if got := sec.policy.Decide("token:evil", "jobs", policy.ActionSQLWrite); !got.Allowed {
			t.Errorf("after chmod go-w and a reload: the rule is not in force")
		}
	})
}

func TestCheckRedisAddrs(t *testing.T) {
	for _, tc := range []struct {
		deps     depsConfig
		addr     string
		insecure bool
		want     string
	}{
		{deps: depsConfig{RedisPassword: "pw"}, addr: "127.0.0.1:6379"},
		{deps: depsConfig{RedisPassword: "pw"}, addr: "localhost:6379"},
		{deps: depsConfig{RedisPassword: "pw"}, addr: "/run/redis.sock"},
		{deps: depsConfig{}, addr: "10.0.0.5:6379"},
		{deps: depsConfig{RedisPassword: "pw", RedisTLS: true}, addr: "10.0.0.5:6379"},
		{deps: depsConfig{RedisPassword: "pw", RedisCAFile: "ca.pem"}, addr: "10.0.0.5:6379"},
		{deps: depsConfig{RedisPassword: "pw"}, addr: "10.0.0.5:6379", insecure: true},
		{deps: depsConfig{RedisPassword: "pw"}, addr: "10.0.0.5:6379", want: "--redis-password would go in plain text to --redis-addr 10.0.0.5:6379"},
		{deps: depsConfig{RedisPassword: "pw"}, addr: "redis.internal:6379", want: "--redis-password"},
	} {
		err := tc.deps.checkRedisAddrs(tc.insecure, [2]string{"--redis-addr", tc.addr})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s %+v: got %v, want no error", tc.addr, tc.deps, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s %+v: got %v, want an error containing %q", tc.addr, tc.deps, err, tc.want)
		}
	}
	// The lease's Redis too, and serve's flags reach the check.
	var out bytes.Buffer
	err := run(t.Context(), []string{
		"serve", "--etcd-endpoints=", "--term-sources=*=redis-lease", "--redis-addr=127.0.0.1:1",
		"--redis-lease-addr=10.0.0.5:6379", "--redis-password=pw",
	}, &out, &out)
	if code := exitStatus(err, &out); code != 2 || !strings.Contains(out.String(), "--redis-password would go in plain text to --redis-lease-addr 10.0.0.5:6379") {
		t.Errorf("serve: got exit %d, %q; want 2 naming --redis-password and --redis-lease-addr", code, out.String())
	}
}

func TestCheckEtcdListen(t *testing.T) {
	for _, tc := range []struct {
		url      string
		insecure bool
		want     bool
	}{
		{"http://127.0.0.1:2379", false, false},
		{"http://localhost:2379", false, false},
		{"http://[::1]:2379", false, false},
		{"http://0.0.0.0:2379", false, true},
		{"http://10.0.0.5:2379", false, true},
		{"http://:2379", false, true},
		{"http://0.0.0.0:2379", true, false},
	} {
		err := checkEtcdListen(tc.url, tc.insecure)
		if got := err != nil; got != tc.want || got && !strings.Contains(err.Error(), "--etcd-listen "+tc.url+" is reachable from other hosts") {
			t.Errorf("%s insecure=%v: got %v, want refused %v", tc.url, tc.insecure, err, tc.want)
		}
	}
	var out bytes.Buffer
	err := run(t.Context(), []string{"dev", "--etcd-listen=http://0.0.0.0:2379"}, &out, &out)
	if code := exitStatus(err, &out); code != 2 || !strings.Contains(out.String(), "--etcd-listen") {
		t.Errorf("dev: got exit %d, %q; want 2 naming --etcd-listen", code, out.String())
	}
}

// TestDSNParseErrorsNameTheFlagOnly: a DSN that does not parse is refused
// naming the flag and the reason, never any part of the DSN.
func TestDSNParseErrorsNameTheFlagOnly(t *testing.T) {
	const dsn = "host=127.0.0.1 port=1 user=gw password = Rt22FullLeak sslmode=bogus"
	for _, args := range [][]string{
		{"serve", "--etcd-endpoints=", "--term-sources=*=monotonic", "--postgres-dsn=" + dsn},
		{"serve", "--etcd-endpoints=", "--term-sources=*=monotonic", "--postgres-dsn=postgres://127.0.0.1:1/db", "--postgres-migrate-dsn=" + dsn},
		{"migrate", "--postgres-dsn=" + dsn},
		{"grant", "--postgres-dsn=" + dsn, "--login=gw", "--role=writer"},
	} {
		var out bytes.Buffer
		err := run(t.Context(), args, &out, &out)
		code := exitStatus(err, &out)
		flag := strings.SplitN(args[len(args)-1], "=", 2)[0]
		if args[0] == "grant" {
			flag = "--postgres-dsn"
		}
		if code != 2 || !strings.Contains(out.String(), flag+": cannot parse the connection string (not shown") || !strings.Contains(out.String(), "sslmode is invalid") {
			t.Errorf("%s: got exit %d, %q; want 2 naming %s and the reason", args[0], code, out.String(), flag)
		}
		if strings.Contains(out.String(), "Rt22FullLeak") || strings.Contains(out.String(), "user=gw") {
			t.Errorf("%s: the DSN shows in %q", args[0], out.String())
		}
	}
}
