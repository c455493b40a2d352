package redislease_test

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/election/redislease"
	"github.com/fencegate/fencegate/tokens"
)

// Minimal form of the counter-reset hole: the source saw holder a with
// token 5; the lease Redis then loses both keys (FLUSHALL, restart without
// AOF, keys deleted) and b takes the lease and gets token 1 from INCR.
// A fresh Verify of a's token 5 must not call it the current term: the
// lease now belongs to b's term 1, and no lease of term 5 exists.
func TestRedTeamVerifyAfterCounterReset(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: redisAddr, Protocol: 2})
	t.Cleanup(func() { c.Close() })
	s, err := redislease.New(c, redislease.Config{PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	fence := unique("redteam-reset")
	k := s.Keys(fence)
	ctx := t.Context()
	c.Set(ctx, k.Counter, 4, 0)
	c.Set(ctx, k.Lease, "a", time.Minute)
	a := c.Incr(ctx, k.Counter).Val()
	if term, held, err := s.Verify(ctx, fence, a); err != nil || !held || tokens.DecideVerified(tokens.Token(a), 0, term, held) != tokens.Accept {
		t.Fatalf("a's token %d: got %+v held %v err %v, want accepted", a, term, held, err)
	}

	c.Del(ctx, k.Lease, k.Counter)
	c.Set(ctx, k.Lease, "b", time.Minute)
	b := c.Incr(ctx, k.Counter).Val()

	term, held, err := s.Verify(ctx, fence, a)
	if err != nil {
		t.Fatal(err)
	}
	if o := tokens.DecideVerified(tokens.Token(a), 0, term, held); o == tokens.Accept {
		t.Errorf("a's token %d after the reset (Redis: lease %q, counter %d): Verify answers %+v held %v, decided %s; want not accepted",
			a, c.Get(ctx, k.Lease).Val(), b, term, held, o)
	}
	if err := s.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if got := s.Term(fence); got.Rev == a {
		t.Errorf("after a poll, memory still says term %d is current (leader %q), Redis says %d", got.Rev, got.Leader, b)
	}
}
