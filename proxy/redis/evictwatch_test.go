package redis

import (
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/proxy/redis/throwaway"
	"github.com/fencegate/fencegate/tokens"
)

// TestEvictionPolicyChangedAtRunTime: Open refuses a server that may evict
// the high-water marks (TestRedTeam17EvictedHighWaterMark), but Redis's
// maxmemory-policy can be changed while fencegate serves (CONFIG SET,
// redis.conf on a restart of a replica promoted later). Changed to
// allkeys-lru, it let one fence's writer fill Redis until another fence's
// mark was evicted, and that fence's zombie was then accepted. The backend
// reads the policy again every EvictionCheck: while it is allkeys-*, every
// write is refused BACKEND_UNAVAILABLE naming it, and Ping fails (so
// /readyz says why); changed back, writes are accepted again.
func TestEvictionPolicyChangedAtRunTime(t *testing.T) {
	ctx := t.Context()
	srv, db := boundedRedis(t) // with the policy Open accepts
	cfg := DefaultConfig()
	const check = 20 * time.Millisecond
	cfg.EvictionCheck = check
	b, err := Open(ctx, srv.Addr(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })

	victim, attacker := "evict-victim", "evict-attacker"
	execOKOn(t, b, victim, 5, []string{"SET", key(victim, "owner"), "old"})
	execOKOn(t, b, victim, 10, []string{"SET", key(victim, "owner"), "new"})

	// An operator changes the policy while fencegate serves.
	if err := db.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * check)
	if err := b.Ping(ctx); err == nil || !strings.Contains(err.Error(), "maxmemory-policy allkeys-lru") {
		t.Errorf("Ping with allkeys-lru: got %v, want an error naming the policy", err)
	}

	// Fence A's leader writes its own keys, 256 KiB at a time, until Redis
	// evicts fence B's mark or fencegate refuses.
	value := strings.Repeat("x", 256<<10)
	for i := range 400 {
		_, err := b.Exec(ctx, attacker, 1, [][]string{{"SET", key(attacker, "blob"+strconv.Itoa(i)), value}})
		if err != nil {
			r, ok := tokens.AsRefusal(err)
			if !ok || r.Reason != tokens.ReasonBackendUnavailable || !strings.Contains(r.Error(), "maxmemory-policy allkeys-lru") {
				t.Fatalf("write %d of fence %s with allkeys-lru: got %v, want BACKEND_UNAVAILABLE naming the policy", i, attacker, err)
			}
			if i > 0 {
				t.Errorf("write %d of fence %s was the first refused, want the first after the change", i, attacker)
			}
			break
		}
		if db.Exists(ctx, TokenKey(victim)).Val() == 0 {
			t.Logf("fence %s's mark evicted after %d writes of fence %s", victim, i+1, attacker)
			break
		}
	}
	// The zombie of fence B, token 5 < 10, is refused whichever way.
	_, err = b.Exec(ctx, victim, 5, [][]string{{"SET", key(victim, "owner"), "zombie"}})
	if err == nil {
		t.Errorf("zombie write at token 5 after token 10 was accepted: accepted")
	}
	if got := db.Get(ctx, key(victim, "owner")).Val(); got != "new" {
		t.Errorf("fence %s's data holds %q, want %q", victim, got, "new")
	}

	// Changed back, writes are accepted again.
	if err := db.ConfigSet(ctx, "maxmemory-policy", "volatile-lru").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * check)
	if err := b.Ping(ctx); err != nil {
		t.Errorf("Ping with volatile-lru: %v", err)
	}
	execOKOn(t, b, victim, 10, []string{"SET", key(victim, "owner"), "newer"})
}

// boundedRedis starts a throwaway Redis whose maxmemory is 8 MiB above
// what it uses empty (a cache-style bound), and a client of it.
func boundedRedis(t *testing.T) (*throwaway.Server, *goredis.Client) {
	t.Helper()
	ctx := t.Context()
	srv, err := throwaway.Start(ctx, throwaway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	db := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { _ = db.Close() })
	info, err := db.Info(ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	var base int64
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			base, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if err := db.ConfigSet(ctx, "maxmemory", strconv.FormatInt(base+8<<20, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	return srv, db
}
