package redis

import (
	"strconv"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/tokens"
)

// TestRedTeam17EvictedHighWaterMark: the high-water mark is an ordinary
// Redis key (fencegate:{F}:token, no TTL), so a server with maxmemory and
// an allkeys-* eviction policy (allkeys-lru, the usual "bound the whole
// with Redis's maxmemory" setting the package doc points to) may evict
// it. Open neither refuses nor warns about such a policy. A writer of
// fence A then only has to write enough data to its own fence, through
// allowed commands (SET of its own {A} keys), for Redis to evict fence
// B's cold mark; after that a zombie of B with a token below B's mark is
// accepted by the script (cur is nil, so no comparison) and overwrites
// the newer leader's data: rule 2 no longer holds, and one fence's writer
// broke another fence's fencing.
//
// Expected: Open refuses (or at least the backend refuses writes on) a
// server whose maxmemory-policy can evict the marks, or the stale write
// is refused STALE_TOKEN. Either way no write below an accepted token is
// stored.
func TestRedTeam17EvictedHighWaterMark(t *testing.T) {
	ctx := t.Context()
	srv, db := boundedRedis(t)
	if err := db.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}

	b, err := Open(ctx, srv.Addr(), DefaultConfig())
	if err != nil {
		// Refusing a server that can evict the marks closes the hole.
		t.Logf("Open refused the server: %v", err)
		return
	}
	t.Cleanup(func() { _ = b.Close() })

	victim, attacker := "rt17-evict-b", "rt17-evict-a"
	// Fence B: the old leader wrote at 5, the new leader at 10.
	execOKOn(t, b, victim, 5, []string{"SET", key(victim, "owner"), "old"})
	execOKOn(t, b, victim, 10, []string{"SET", key(victim, "owner"), "new"})

	// Fence A's leader writes its own keys, 256 KiB at a time.
	value := strings.Repeat("x", 256<<10)
	evicted := false
	for i := 0; i < 400 && !evicted; i++ {
		_, err := b.Exec(ctx, attacker, 1, [][]string{{"SET", key(attacker, "blob"+strconv.Itoa(i)), value}})
		if err != nil {
			t.Fatalf("write %d of fence %s: %v", i, attacker, err)
		}
		evicted = db.Exists(ctx, TokenKey(victim)).Val() == 0
	}
	if !evicted {
		t.Logf("the mark of %s was not evicted", victim)
	}

	// The zombie of fence B, token 5 < 10.
	_, err = b.Exec(ctx, victim, 5, [][]string{{"SET", key(victim, "owner"), "zombie"}})
	if r, ok := tokens.AsRefusal(err); !ok || r.Reason != tokens.ReasonStaleToken {
		t.Errorf("zombie write at token 5 after the mark 10 was evicted by fence %s's writes: got %v, want %s", attacker, err, tokens.ReasonStaleToken)
	}
	if got := db.Get(ctx, key(victim, "owner")).Val(); got == "zombie" {
		t.Errorf("fence %s's data holds %q, written with token 5 after token 10 was accepted", victim, got)
	}
}
