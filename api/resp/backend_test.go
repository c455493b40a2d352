package resp_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/resp"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/redis"
	"github.com/fencegate/fencegate/proxy/redis/throwaway"
)

// TestRedisGone: with Redis down, a write through the listener gets an
// error reply whose first word is BACKEND_UNAVAILABLE and which names the
// server, and nothing else changes: the connection stays open and logged
// in, and once Redis is back the same connection writes again.
func TestRedisGone(t *testing.T) {
	ctx := t.Context()
	own, err := throwaway.Start(ctx, throwaway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = own.Close() })
	e := newEnvAt(t, resp.Config{}, proxy.Options{}, redis.DefaultConfig(), own.Addr())
	f := unique("gone")
	tok, _ := e.lead(t, f)
	c := plainClient(t, e.addr, f, strconv.FormatUint(tok, 10))
	k := "{" + f + "}:n"
	if err := c.Set(ctx, k, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}

	if err := own.Kill(); err != nil {
		t.Fatal(err)
	}
	err = c.Set(ctx, k, "2", 0).Err()
	if err == nil || !strings.HasPrefix(err.Error(), "BACKEND_UNAVAILABLE ") || !strings.Contains(err.Error(), own.Addr()) {
		t.Fatalf("SET with Redis down: got %v, want BACKEND_UNAVAILABLE naming %s", err, own.Addr())
	}
	t.Logf("SET with Redis down: %v", err)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after the refused write: %v, want the connection still open", err)
	}

	if err := own.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	// go-redis's pool may fail dials for up to a second after an outage
	// (proxy/redis's TestExecErrors).
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		err = c.Set(ctx, k, "3", 0).Err()
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("SET once Redis is back, on the same connection: %v", err)
	}
	if got := e.stored(t, k); got != "3" {
		t.Errorf("stored after the restart: got %q, want 3", got)
	}
}
