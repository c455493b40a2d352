package redis

import (
	"slices"
	"strconv"
	"testing"

	"github.com/fencegate/fencegate/tokens"
)

// TestExecAllocs bounds what a leader's lone write allocates. The pooled
// call with its buffers, the one-call batch and the fence's boxed token
// key and token are reused; what is left, for a SET (profiled
// 2026-11-28): its two arguments boxed for go-redis's []any, go-redis's
// command, the reply it reads (3), and the health check its pool runs on
// each connection it hands out (3). Before, 23 allocations per write.
func TestExecAllocs(t *testing.T) {
	b := openBackend(t, DefaultConfig())
	fence := unique("allocs")
	cmds := [][]string{{"SET", key(fence, "k"), "v"}}
	if _, err := b.Exec(t.Context(), fence, 5, cmds); err != nil {
		t.Fatal(err)
	}
	write := func() {
		if _, err := b.Exec(t.Context(), fence, 5, cmds); err != nil {
			t.Fatal(err)
		}
	}
	// AllocsPerRun counts the whole process's allocations: the fewest of a
	// few runs is the write's.
	got := testing.AllocsPerRun(200, write)
	for range 3 {
		got = min(got, testing.AllocsPerRun(200, write))
	}
	limit := 10.0
	if raceEnabled {
		limit = 14 // calls dropped by the pool (raceEnabled) are made anew
	}
	if got > limit {
		t.Errorf("a lone SET allocates %.1f times, want at most %.0f", got, limit)
	}
}

// TestPlanReused: a plan reset and filled again for another write is the
// plan a new one would be, whatever the write before it held.
func TestPlanReused(t *testing.T) {
	b := openBackend(t, DefaultConfig())
	f, g := unique("reuse"), unique("reuse")
	writes := []struct {
		fence string
		t     tokens.Token
		cmds  [][]string
	}{
		{f, 7, [][]string{{"MSET", key(f, "a"), "1", key(f, "b"), "2"}, {"GET", key(f, "c")}, {"INCR", key(f, "a")}}},
		{g, 9, [][]string{{"SET", key(g, "x"), "1"}}},
		// Refused half-way through its check, with arguments laid out.
		{f, 8, [][]string{{"SET", key(f, "x"), "1"}, {"SET", key(g, "y"), "1"}}},
		{f, 8, [][]string{{"GET", key(f, "c")}}},
		{f, 7, [][]string{{"DEL", key(f, "a")}, {"SADD", key(f, "s"), "m"}}},
	}
	var reused plan
	for i, w := range writes {
		reused.reset()
		var fresh plan
		r1 := b.planOf(&reused, w.fence, w.t, w.cmds)
		r2 := b.planOf(&fresh, w.fence, w.t, w.cmds)
		if r1 != nil || r2 != nil {
			if r1 == nil || r2 == nil || r1.Error() != r2.Error() {
				t.Fatalf("write %d: refused by the reused plan with %v, by a new one with %v", i, r1, r2)
			}
			continue
		}
		if !slices.Equal(reused.cmd, fresh.cmd) || reused.nw != fresh.nw || reused.lease != fresh.lease {
			t.Errorf("write %d: reused plan sends %q (%d written), a new one %q (%d written)",
				i, reused.cmd, reused.nw, fresh.cmd, fresh.nw)
		}
		if want := w.t.String(); reused.args[argToken] != want {
			t.Errorf("write %d: token argument %v, want %s", i, reused.args[argToken], want)
		}
	}
}

// TestFenceArgs: each fence's boxed token key and token follow the token
// asked for, also when two tokens alternate (a leader and its zombie), and
// the cache stops growing at its bound.
func TestFenceArgs(t *testing.T) {
	var a fenceArgs
	for _, tok := range []tokens.Token{5, 6, 5, 6, 6, 12345678901234} {
		key, arg := a.of("jobs", tok)
		if key != TokenKey("jobs") || arg != tok.String() {
			t.Errorf("token %d: got %v, %v; want %s, %s", tok, key, arg, TokenKey("jobs"), tok.String())
		}
	}
	for i := range maxArgFences + 10 {
		name := unique("f")
		if key, _ := a.of(name, tokens.Token(i+1)); key != TokenKey(name) {
			t.Fatalf("fence %s: key %v", name, key)
		}
	}
	if n := len(a.m); n != maxArgFences {
		t.Errorf("cached fences: %d, want the bound %d", n, maxArgFences)
	}
}

// TestRefusedWritesLeaveNoFenceArgs: a write refused by its check (a
// command out of the allowlist, a key of another fence) makes no entry in
// the backend's per-fence cache, so refused requests cannot fill it.
func TestRefusedWritesLeaveNoFenceArgs(t *testing.T) {
	b := openBackend(t, DefaultConfig())
	f := unique("refusedargs")
	for _, cmds := range [][][]string{
		{{"EVAL", "return 1", "0"}},
		{{"SET", "{other}:k", "v"}},
		{{"SET", key(f, "k"), "v"}, {"FLUSHALL"}},
	} {
		if _, err := b.Exec(t.Context(), f, 3, cmds); err == nil {
			t.Fatalf("%q: accepted, want refused", cmds)
		}
	}
	b.args.mu.RLock()
	_, cached := b.args.m[f]
	b.args.mu.RUnlock()
	if cached {
		t.Errorf("fence %s: refused writes left an entry in the cache", f)
	}
	if _, err := b.Exec(t.Context(), f, 3, [][]string{{"SET", key(f, "k"), "v"}}); err != nil {
		t.Fatal(err)
	}
	b.args.mu.RLock()
	_, cached = b.args.m[f]
	b.args.mu.RUnlock()
	if !cached {
		t.Errorf("fence %s: an applied write left no entry in the cache", f)
	}
}

// TestResetDropsLargeBuffers: a write of many arguments leaves no buffers
// in the pool, which would otherwise hold them for the writes after it.
func TestResetDropsLargeBuffers(t *testing.T) {
	b := openBackend(t, DefaultConfig())
	f := unique("large")
	mset := []string{"MSET"}
	for i := range 1000 {
		mset = append(mset, key(f, strconv.Itoa(i)), "v")
	}
	var p plan
	if r := b.planOf(&p, f, 3, [][]string{mset}); r != nil {
		t.Fatal(r)
	}
	p.reset()
	if cap(p.cmd) != 0 || cap(p.args) != 0 || cap(p.keys) != 0 || cap(p.written.list) != 0 {
		t.Errorf("after a write of %d arguments the plan keeps buffers of %d, %d, %d and %d elements, want none",
			len(mset), cap(p.cmd), cap(p.args), cap(p.keys), cap(p.written.list))
	}
	if r := b.planOf(&p, f, 3, [][]string{{"SET", key(f, "k"), "v"}}); r != nil {
		t.Fatal(r)
	}
	p.reset()
	if cap(p.cmd) == 0 {
		t.Error("a small write's buffers are not kept")
	}
}
