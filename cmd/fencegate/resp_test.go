package main

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/api/auth/authtest"
	"github.com/fencegate/fencegate/election/freeport"
	redisthrowaway "github.com/fencegate/fencegate/proxy/redis/throwaway"
)

// redisCli runs the real redis-cli with args and returns its output.
func redisCli(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-cli", append([]string{"--no-auth-warning"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestServeRedisListener runs `fencegate serve --redis-listen-addr` with
// mTLS and a policy, driven by the real redis-cli over TLS: a
// certificate the policy allows writes its fence, one it does not is
// refused with NOT_AUTHORIZED, a stale token with STALE_TOKEN, and
// neither stores anything. On the listener's Unix socket redis-cli
// connects without TLS, as to Redis's own, and, with no certificate to
// name it, is refused as unauthenticated.
func TestServeRedisListener(t *testing.T) {
	e := newSecureEnv(t)
	rd, err := redisthrowaway.Start(t.Context(), redisthrowaway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close() })
	alice := e.ca.Issue(t, "alice", authtest.Leaf{URIs: []string{"spiffe://test/a/alice"}, Client: true})
	bob := e.ca.Issue(t, "bob", authtest.Leaf{URIs: []string{"spiffe://test/b/bob"}, Client: true})
	policyFile := e.writeFile(t, "policy.yaml", `rules:
  - name: alice-writes-r
    principals: ["spiffe://test/a/alice"]
    fences: ["r"]
    actions: [redis.write]
`)
	addr := freeport.Addr(t)
	sock := filepath.Join(t.TempDir(), "fencegate-redis.sock")
	e.serveGateway(t, "--redis-addr="+rd.Addr(), "--redis-listen-addr="+addr, "--redis-unix-socket="+sock, "--cert-file="+e.srv.CertFile, "--key-file="+e.srv.KeyFile,
		"--trusted-ca-file="+e.ca.File, "--policy-file="+policyFile)
	tok := e.lead(t, "r", "alice")
	host, port, _ := strings.Cut(addr, ":")
	cli := func(cert *authtest.Issued, token uint64, args ...string) string {
		t.Helper()
		return redisCli(t, append([]string{
			"-h", host, "-p", port, "--tls", "--sni", "localhost", "--cacert", e.ca.File,
			"--cert", cert.CertFile, "--key", cert.KeyFile, "--user", "r", "--pass", fmt.Sprint(token),
		}, args...)...)
	}
	for _, tt := range []struct {
		name  string
		cert  *authtest.Issued
		token uint64
		key   string
		want  string
	}{
		{"alice", alice, tok, "{r}:alice", "OK"},
		{"bob", bob, tok, "{r}:bob", "NOT_AUTHORIZED fencegate: \"spiffe://test/b/bob\" may not redis.write fence \"r\""},
		{"stale", alice, tok - 1, "{r}:stale", "STALE_TOKEN fencegate: "},
	} {
		if got := cli(tt.cert, tt.token, "SET", tt.key, "v"); !strings.HasPrefix(got, tt.want) {
			t.Errorf("%s: got %q, want %q...", tt.name, got, tt.want)
		}
	}
	// Refused at AUTH: the connection never logs in.
	if got := redisCli(t, "-s", sock, "--user", "r", "--pass", fmt.Sprint(tok), "SET", "{r}:socket", "v"); !strings.HasPrefix(got, "AUTH failed: UNAUTHENTICATED fencegate: no client certificate on a Unix socket") {
		t.Errorf("redis-cli -s: got %q, want AUTH failed: UNAUTHENTICATED", got)
	}
	direct := goredis.NewClient(&goredis.Options{Addr: rd.Addr(), DisableIdentity: true})
	defer direct.Close()
	for key, want := range map[string]int64{"{r}:alice": 1, "{r}:bob": 0, "{r}:stale": 0, "{r}:socket": 0} {
		if n, err := direct.Exists(t.Context(), key).Result(); err != nil || n != want {
			t.Errorf("key %s in Redis: got %d (%v), want %d", key, n, err, want)
		}
	}
}

// TestRedisListenChecks: --redis-listen-addr needs --redis-addr, and
// beyond loopback TLS and a policy, like the other listeners.
func TestRedisListenChecks(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--postgres-dsn=postgres://x@127.0.0.1:1/x", "--redis-listen-addr=127.0.0.1:0"}, "--redis-listen-addr needs --redis-addr"},
		{[]string{"serve", "--redis-addr=127.0.0.1:1", "--redis-listen-addr=0.0.0.0:0"}, "--redis-listen-addr 0.0.0.0:0 is reachable from other hosts"},
	} {
		err := run(t.Context(), tt.args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: got %v, want %q", tt.args, err, tt.want)
		}
	}
}
