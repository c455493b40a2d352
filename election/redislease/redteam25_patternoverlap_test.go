package redislease_test

import (
	"testing"
	"time"

	"github.com/fencegate/fencegate/election/redislease"
	"github.com/fencegate/fencegate/tokens"
)

// TestRedTeam25OverlappingPatternsKeepTermForever: New checks each key
// pattern alone (one %s, the hash tag {%s}) and that the two are not the
// same string. It does not check that no fence's lease key can be another
// fence's counter key. Fence names may hold '-', '.' and '_', so with the
// natural patterns "lease-%s" and "lease-%s-token" (or "lock.%s" and
// "lock.%s.fence") fence "X-token"'s lease key is
// fence X's counter, "lease-X-token". The defaults ("lease:%s",
// "lease:%s:token") are safe only because ':' is not a fence character.
//
// Attack: with such patterns, L leads fence X-token (SET lease-X-token NX
// PX, INCR lease-X-token-token: token 1). L's lease runs out (L is paused:
// a zombie). Then fence X gets its first leader M (SET lease-X NX PX,
// INCR lease-X-token): the key that is X-token's lease now holds X's
// counter, with no TTL.
//
// What happened (on this code): the source reads lease-X-token as X-token's
// lease, held for ever by a holder named "1" (X's counter): term 1 of
// X-token is current. The zombie L's token is verified held and decided
// Accept, for as long as fence X exists; and no candidate of X-token can
// ever take its lease again (SET NX fails on X's counter), so the fence
// is stuck with the zombie. The Redis backend's lease script checks the
// same two keys and agrees.
//
// What should happen: New (fencegate serve) refuses a pair of patterns
// under which one fence's lease or counter key can be another fence's
// key (e.g. require a character fence names cannot hold, such as ':' or
// the {%s} hash tag, right after %s, or check that neither pattern is a
// prefix-extension of the other); or the term source never treats a key
// that holds an integer counter as a lease.
//
// Severity: medium (config-dependent: custom --redis-lease-key /
// --redis-lease-counter patterns; then an ended term is current for ever
// and its fence's real candidates are locked out).
func TestRedTeam25OverlappingPatternsKeepTermForever(t *testing.T) {
	ctx := t.Context()
	c := newClient(t)
	s, err := redislease.New(c, redislease.Config{KeyPattern: "rt25-lease-%s", CounterPattern: "rt25-lease-%s-token", PollInterval: time.Hour})
	if err != nil {
		t.Logf("patterns refused: %v", err)
		return
	}
	x := unique("jobs")
	y := x + "-token"
	kx, ky := s.Keys(x), s.Keys(y)
	t.Logf("fence %s: %+v; fence %s: %+v", x, kx, y, ky)

	l := &leaseWorker{c: c, key: ky.Lease, counter: ky.Counter, id: "L"}
	tl := l.acquire(t, 300*time.Millisecond)
	if tl == 0 {
		t.Fatal("L did not get the lease of " + y)
	}
	if _, held, err := s.Verify(ctx, y, tl); err != nil || !held {
		t.Fatalf("verify L: held %v err %v", held, err)
	}
	waitGone(t, c, ky.Lease) // L's term of y ends: L is a zombie

	m := &leaseWorker{c: c, key: kx.Lease, counter: kx.Counter, id: "M"}
	if tm := m.acquire(t, time.Minute); tm == 0 {
		t.Fatal("M did not get the lease of " + x)
	}

	term, held, err := s.Verify(ctx, y, tl)
	if err != nil {
		t.Fatal(err)
	}
	o := tokens.DecideVerified(tokens.Token(tl), tokens.Token(tl), term, held)
	n := &leaseWorker{c: c, key: ky.Lease, counter: ky.Counter, id: "N"}
	tn := n.acquire(t, time.Minute)
	if o == tokens.Accept {
		t.Errorf("patterns %q/%q accepted; after L's lease of %s ran out and %s got its first leader, the zombie L's token %d "+
			"is decided %v (term %+v): %s's lease key is %s's counter; a new candidate of %s got token %d (0: locked out)",
			"rt25-lease-%s", "rt25-lease-%s-token", y, x, tl, o, term, y, x, y, tn)
	}
}
