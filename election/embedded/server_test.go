package embedded

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStartReportsPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()
	_, err = Start(t.Context(), Config{Dir: t.TempDir(), ClientURL: "http://" + addr})
	if !errors.Is(err, ErrPortInUse) {
		t.Fatalf("got %v, want ErrPortInUse", err)
	}
	if want := "embedded etcd: " + addr + " is in use"; err.Error() != want {
		t.Errorf("got %q, want %q", err, want)
	}
}

func TestRestartKeepsDataAndURLs(t *testing.T) {
	dir := t.TempDir()
	srv, err := Start(t.Context(), Config{Dir: dir, NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Dir: dir, NoFsync: true, ClientURL: srv.ClientURL(), PeerURL: srv.PeerURL()}
	put(t, srv.Endpoints(), "k", "v")
	srv.Close()
	srv.Close() // again: no-op

	srv, err = Start(t.Context(), cfg)
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	defer srv.Close()
	if got := strings.Join(srv.Endpoints(), ","); got != cfg.ClientURL {
		t.Errorf("got endpoints %s, want %s", got, cfg.ClientURL)
	}
	if got := get(t, srv.Endpoints(), "k"); got != "v" {
		t.Errorf("got %q after restart, want %q", got, "v")
	}
}

func client(t *testing.T, endpoints []string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func put(t *testing.T, endpoints []string, k, v string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := client(t, endpoints).Put(ctx, k, v); err != nil {
		t.Fatalf("put: %v", err)
	}
}

func get(t *testing.T, endpoints []string, k string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	resp, err := client(t, endpoints).Get(ctx, k)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get: %v", err)
	}
	return string(resp.Kvs[0].Value)
}
