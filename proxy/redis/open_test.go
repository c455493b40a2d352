package redis

import (
	"crypto/tls"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	return port
}

func TestOpenUnreachableNamesAddr(t *testing.T) {
	t.Parallel()
	addr := "127.0.0.1:" + strconv.Itoa(closedPort(t))
	_, err := Open(t.Context(), addr, DefaultConfig())
	if err == nil {
		t.Fatal("Open: got nil, want an error")
	}
	if msg := err.Error(); !strings.Contains(msg, addr) || strings.Contains(msg, "\n") {
		t.Errorf("error: got %q, want one line naming %s", msg, addr)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("DefaultConfig().Validate(): got %v, want nil", err)
	}
	if !DefaultConfig().CheckSlots {
		t.Errorf("DefaultConfig().CheckSlots: got false, want true")
	}
	bad := []Config{
		{PoolSize: -1},
		{DialTimeout: -1},
		{ReadTimeout: -1},
		{WriteTimeout: -1},
		{Allow: []string{"EVAL"}},
		{Allow: []string{"FLUSHALL"}},
		{Allow: []string{"NO-SUCH-COMMAND"}},
		{MaxValueBytes: -1},
		{MaxValueBytes: maxValueLimit + 1},
		{MaxValueBytes: 1 << 20, MaxReplyBytes: 1<<20 - 1},
		{MaxReplyBytes: maxReplyLimit + 1},
	}
	for _, c := range bad {
		if err := c.withDefaults().Validate(); err == nil {
			t.Errorf("Validate(%+v): got nil, want an error", c)
		}
		if _, err := Open(t.Context(), server.Addr(), c); err == nil {
			t.Errorf("Open(%+v): got nil, want an error", c)
		}
	}
	if err := (Config{Allow: []string{"rename", "GET"}}).withDefaults().Validate(); err != nil {
		t.Errorf("Validate with known commands in Allow: got %v, want nil", err)
	}
}

func TestOpenUnixSocket(t *testing.T) {
	t.Parallel()
	sock := server.SocketPath()
	b, err := Open(t.Context(), sock, DefaultConfig())
	if err != nil {
		t.Fatalf("Open(%s): %v", sock, err)
	}
	defer b.Close()
	fence := unique("unix")
	k := key(fence, "k")
	if _, err := b.Exec(t.Context(), fence, 5, [][]string{{"SET", k, "v"}}); err != nil {
		t.Fatalf("fenced SET over the socket: %v", err)
	}
	if _, err := b.Exec(t.Context(), fence, 4, [][]string{{"SET", k, "stale"}}); err == nil {
		t.Fatal("stale SET over the socket: got nil, want a refusal")
	}
	// The TCP listener sees what went over the socket: the same server.
	if got := admin(t).Get(t.Context(), k).Val(); got != "v" {
		t.Errorf("GET over TCP: got %q, want %q", got, "v")
	}

	missing := filepath.Join(t.TempDir(), "redis.sock")
	if _, err := Open(t.Context(), missing, DefaultConfig()); err == nil || !strings.Contains(err.Error(), missing) || strings.Contains(err.Error(), "\n") {
		t.Errorf("Open(missing socket): got %v, want one line naming %s", err, missing)
	}
	withTLS := DefaultConfig()
	withTLS.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	if _, err := Open(t.Context(), sock, withTLS); err == nil || !strings.Contains(err.Error(), "Unix socket") {
		t.Errorf("Open(socket with TLS): got %v, want the refusal naming the Unix socket", err)
	}
}
