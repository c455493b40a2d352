package redis

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/tokens"
)

// leaseKeys is the tests' lease layout, tagged with the fence so that a
// client could name the keys if the lease check did not refuse them.
func leaseKeys(fence string) (LeaseKeys, bool) {
	if !strings.HasPrefix(fence, "lease_") {
		return LeaseKeys{}, false
	}
	return LeaseKeys{Lease: "{" + fence + "}:lease", Counter: "{" + fence + "}:lease:token"}, true
}

func leaseBackend(t *testing.T) *Backend {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Leases = leaseKeys
	b, err := Open(t.Context(), server.Addr(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// acquire is the seed's lease worker taking the lease: SET NX PX, then
// INCR the counter for its token. It returns 0 when the lease is held.
func acquire(t *testing.T, c *goredis.Client, lk LeaseKeys, id string, ttl time.Duration) tokens.Token {
	t.Helper()
	ctx := t.Context()
	ok, err := c.SetNX(ctx, lk.Lease, id, ttl).Result()
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return 0
	}
	n, err := c.Incr(ctx, lk.Counter).Result()
	if err != nil {
		t.Fatal(err)
	}
	return tokens.Token(n)
}

// TestLeaseInScript: a lease fence's writes are checked against the lease
// and counter in the fencing script: the current holder's token is
// applied; a zombie's (below the counter) is STALE_TOKEN even where the
// high-water mark alone would take it; the token of a lease released or
// expired is TERM_ENDED; a token above the counter, or before any, is
// UNKNOWN_TERM; nothing is written for any refusal. A client cannot name
// the lease keys, and a fence of another source is unchanged.
func TestLeaseInScript(t *testing.T) {
	ctx := t.Context()
	b := leaseBackend(t)
	c := admin(t)
	fence := unique("lease")
	lk, _ := leaseKeys(fence)
	data := key(fence, "v")

	write := func(step string, tok tokens.Token, want tokens.Reason) {
		t.Helper()
		before, _ := c.Get(ctx, data).Result()
		_, err := b.Exec(ctx, fence, tok, [][]string{{"SET", data, step}})
		if want == "" {
			if err != nil {
				t.Fatalf("%s: token %d: got %v, want it applied", step, tok, err)
			}
			return
		}
		r, ok := tokens.AsRefusal(err)
		if !ok || r.Reason != want {
			t.Fatalf("%s: token %d: got %v, want %s", step, tok, err, want)
		}
		if after, _ := c.Get(ctx, data).Result(); after != before {
			t.Fatalf("%s: refused, but %s went from %q to %q", step, data, before, after)
		}
	}

	write("forged, before any lease", 1, tokens.ReasonUnknownTerm)
	ta := acquire(t, c, lk, "a", time.Minute)
	write("a leads", ta, "")
	write("forged, above the counter", ta+1, tokens.ReasonUnknownTerm)
	if err := c.Del(ctx, lk.Lease).Err(); err != nil { // a releases
		t.Fatal(err)
	}
	write("a released its lease", ta, tokens.ReasonTermEnded)
	tb := acquire(t, c, lk, "b", 300*time.Millisecond)
	write("a is a zombie: b holds the lease (the high-water mark alone is still a's)", ta, tokens.ReasonStaleToken)
	write("b leads", tb, "")
	waitFor(t, "b's lease to expire", func() bool { return c.Exists(ctx, lk.Lease).Val() == 0 })
	write("b's lease expired", tb, tokens.ReasonTermEnded)
	if v, _ := c.Get(ctx, TokenKey(fence)).Result(); v != tb.String() {
		t.Fatalf("high-water mark: got %q, want %d", v, tb)
	}

	// The lease keys are the lease's: a client naming them is refused
	// before anything is sent.
	tc := acquire(t, c, lk, "c", time.Minute)
	for _, cmd := range [][]string{{"DEL", lk.Lease}, {"SET", lk.Counter, "999"}, {"GET", lk.Lease}, {"PEXPIRE", lk.Lease, "100000"}} {
		_, err := b.Exec(ctx, fence, tc, [][]string{cmd})
		if r, ok := tokens.AsRefusal(err); !ok || r.Reason != tokens.ReasonInvalidRequest || !strings.Contains(r.Msg, "lease") {
			t.Fatalf("%v: got %v, want INVALID_REQUEST naming the lease", cmd, err)
		}
	}
	if v, _ := c.Get(ctx, lk.Counter).Result(); v != tc.String() {
		t.Fatalf("counter: got %q, want %d", v, tc)
	}
	write("c leads", tc, "")

	// A fence of another source runs the plain script: no lease needed.
	other := unique("plain")
	if _, err := b.Exec(ctx, other, 1, [][]string{{"SET", key(other, "v"), "x"}}); err != nil {
		t.Fatalf("a fence of another source: got %v, want it applied", err)
	}
}

// TestLeaseCorruptCounter: a counter that holds no token refuses the
// write, naming the key.
func TestLeaseCorruptCounter(t *testing.T) {
	ctx := t.Context()
	b := leaseBackend(t)
	c := admin(t)
	fence := unique("lease")
	lk, _ := leaseKeys(fence)
	if err := c.Set(ctx, lk.Counter, "banana", 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := b.Exec(ctx, fence, 1, [][]string{{"SET", key(fence, "v"), "x"}})
	if r, ok := tokens.AsRefusal(err); !ok || r.Reason != tokens.ReasonBackendUnavailable || !strings.Contains(r.Msg, lk.Counter) {
		t.Fatalf("got %v, want BACKEND_UNAVAILABLE naming %s", err, lk.Counter)
	}
	if n, _ := c.Exists(ctx, key(fence, "v")).Result(); n != 0 {
		t.Fatal("written anyway")
	}
}

// TestLeaseBatched: lease writes and plain ones sent at once through one
// connection slot, so that most share a pipeline, each run their own
// script with their own outcome.
func TestLeaseBatched(t *testing.T) {
	ctx := t.Context()
	cfg := DefaultConfig()
	cfg.Leases = leaseKeys
	cfg.PoolSize = 1
	b, err := Open(ctx, server.Addr(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c := admin(t)
	fence, plain := unique("lease"), unique("plain")
	lk, _ := leaseKeys(fence)
	tok := acquire(t, c, lk, "a", time.Minute)
	errs := make(chan string, 40)
	for i := range 40 {
		go func() {
			f, tk, want := plain, tokens.Token(1), error(nil)
			switch i % 3 {
			case 0:
				f, tk = fence, tok
			case 1:
				f, tk, want = fence, tok+1, tokens.ErrUnknownTerm
			}
			_, err := b.Exec(ctx, f, tk, [][]string{{"INCR", key(f, "n")}})
			if (want == nil) != (err == nil) || !errors.Is(err, want) {
				errs <- fmt.Sprintf("%s, token %d: got %v, want %v", f, tk, err, want)
				return
			}
			errs <- ""
		}()
	}
	for range 40 {
		if msg := <-errs; msg != "" {
			t.Fatal(msg)
		}
	}
	if n, _ := c.Get(ctx, key(fence, "n")).Int(); n != 14 {
		t.Fatalf("lease fence: got %d increments, want 14", n)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
