package redislease_test

import (
	"testing"
	"time"

	"github.com/fencegate/fencegate/election/redislease"
)

// TestRedTeam17PollOneBadFenceFreezesAll: the package promises that Run
// refreshes every fence it polls each interval, so that a lease that
// expired or changed hands is known from memory within about one
// interval. Poll reads all fences in one pipeline and, when any one
// command of it fails, returns before folding a single reply. One fence
// whose counter key has the wrong type (a stray LPUSH by any Redis user,
// a key pattern clash) makes every poll fail with WRONGTYPE, and memory
// of every other fence freezes for good: a released lease is reported
// held (GetFence's leader, fencegate_election_has_leader) indefinitely.
// Expected: the other fences' replies are folded and the bad one is
// reported as Poll's error.
func TestRedTeam17PollOneBadFenceFreezesAll(t *testing.T) {
	ctx := t.Context()
	c := newClient(t)
	s, err := redislease.New(c, redislease.Config{PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	good, bad := unique("rt17-good"), unique("rt17-bad")
	kg, kb := s.Keys(good), s.Keys(bad)
	a := &leaseWorker{c: c, key: kg.Lease, counter: kg.Counter, id: "a"}
	x := &leaseWorker{c: c, key: kb.Lease, counter: kb.Counter, id: "x"}
	ta := a.acquire(t, time.Minute)
	tx := x.acquire(t, time.Minute)
	for _, f := range []struct {
		name string
		tok  int64
	}{{good, ta}, {bad, tx}} {
		if _, held, err := s.Verify(ctx, f.name, f.tok); err != nil || !held {
			t.Fatalf("Verify %s: held %v err %v", f.name, held, err)
		}
	}
	// The bad fence's counter becomes a list: GET on it fails WRONGTYPE.
	if err := c.Del(ctx, kb.Counter).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.RPush(ctx, kb.Counter, "junk").Err(); err != nil {
		t.Fatal(err)
	}
	a.release(t)
	perr := s.Poll(ctx)
	if got := s.Term(good); got.HasLeader() {
		t.Errorf("after a's lease of %q was released and a Poll (error %v), memory still says term %d led by %q: one bad fence (%s) stops every other fence from being refreshed",
			good, perr, got.Rev, got.Leader, kb.Counter)
	}
	if perr == nil {
		t.Errorf("Poll: got no error, want one naming %s", kb.Counter)
	}
}
