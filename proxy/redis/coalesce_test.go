package redis

import (
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/tokens"
)

// openBackend opens a Backend of its own on the shared server.
func openBackend(t *testing.T, cfg Config) *Backend {
	t.Helper()
	b, err := Open(t.Context(), server.Addr(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// TestBatchWritesAreSeparateScripts: writes that share a round trip are
// applied or refused each on its own. Not parallel: it pauses the server.
func TestBatchWritesAreSeparateScripts(t *testing.T) {
	b := openBackend(t, onePoolSlot())
	db := admin(t)
	stale := unique("batch")
	execOKOn(t, b, stale, 10, []string{"SET", key(stale, "v"), "10"})

	type write struct {
		fence string
		token tokens.Token
		cmds  [][]string
		want  tokens.Reason // "" for accepted
	}
	var writes []write
	for i := range 6 {
		f := unique("batch")
		w := write{fence: f, token: 1, cmds: [][]string{{"SET", key(f, "v"), "1"}}}
		switch i {
		case 1: // the second command fails: the first is rolled back
			w.cmds = append(w.cmds, []string{"INCR", key(f, "v") + "x"}, []string{"LPUSH", key(f, "v"), "x"})
			w.want = tokens.ReasonStatementFailed
		case 3:
			w.fence, w.token, w.cmds = stale, 9, [][]string{{"SET", key(stale, "v"), "9"}}
			w.want = tokens.ReasonStaleToken
		}
		writes = append(writes, w)
	}

	// The first write takes the only slot and waits in the paused server;
	// the others queue behind it and go out together.
	if err := db.Do(t.Context(), "CLIENT", "PAUSE", "300", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	errs := make([]error, len(writes))
	var wg sync.WaitGroup
	for i, w := range writes {
		wg.Go(func() {
			_, errs[i] = b.Exec(t.Context(), w.fence, w.token, w.cmds)
		})
		if i == 0 {
			for b.co.Free() != 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}
	wg.Wait()
	if s := b.Stats(); s.Largest < 2 || s.Calls <= s.Batches {
		t.Fatalf("stats: got %+v, want the queued writes sent together", s)
	}
	for i, w := range writes {
		r, _ := tokens.AsRefusal(errs[i])
		switch {
		case w.want == "" && errs[i] != nil:
			t.Errorf("write %d: got %v, want accepted", i, errs[i])
		case w.want != "" && (r == nil || r.Reason != w.want):
			t.Errorf("write %d: got %v, want %s", i, errs[i], w.want)
		}
		if w.fence == stale {
			continue
		}
		got, want := db.Get(t.Context(), key(w.fence, "v")).Val(), "1"
		if w.want != "" {
			want = "" // rolled back: no key
		}
		if got != want {
			t.Errorf("write %d: stored %q, want %q", i, got, want)
		}
	}
	if v := db.Get(t.Context(), key(stale, "v")).Val(); v != "10" {
		t.Errorf("stale write: stored %q, want the earlier \"10\"", v)
	}
}

// TestBatchAfterScriptFlush: every script of a pipelined batch comes back
// NOSCRIPT; each is run again with EVAL, once.
func TestBatchAfterScriptFlush(t *testing.T) {
	t.Parallel()
	b := openBackend(t, onePoolSlot())
	db := admin(t)
	var calls []*call
	var fences []string
	for range 3 {
		f := unique("flushbatch")
		c := &call{fence: f, token: 1}
		if r := b.planOf(&c.plan, f, 1, [][]string{{"INCR", key(f, "n")}}); r != nil {
			t.Fatal(r)
		}
		c.Init(t.Context())
		calls = append(calls, c)
		fences = append(fences, f)
	}
	if err := db.ScriptFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	b.runBatch(calls)
	for i, c := range calls {
		res, err := b.reply(c.fence, c.token, [][]string{{"INCR", key(fences[i], "n")}}, c.res)
		if c.err != nil || err != nil || !reflect.DeepEqual(res, []any{int64(1)}) {
			t.Errorf("write %d: got %v, %v, %v; want [1]", i, res, c.err, err)
		}
		if n := db.Get(t.Context(), key(fences[i], "n")).Val(); n != "1" {
			t.Errorf("write %d: counter %q, want \"1\" (run once)", i, n)
		}
	}
}

// TestBatchedWritersNeverRegress is TestConcurrentWritersNeverRegress with
// one connection slot, so most writes share their round trip.
func TestBatchedWritersNeverRegress(t *testing.T) {
	t.Parallel()
	b := openBackend(t, onePoolSlot())
	for range 5 {
		ledgerRound(t, b)
	}
	if s := b.Stats(); s.Largest < 2 {
		t.Errorf("stats: got %+v, want batches", s)
	}
}

func execOKOn(t *testing.T, b *Backend, fence string, tok tokens.Token, cmds ...[]string) []any {
	t.Helper()
	res, err := b.Exec(t.Context(), fence, tok, cmds)
	if err != nil {
		t.Fatalf("Exec(%s, %d): got %v, want nil", fence, tok, err)
	}
	return res
}

// onePoolSlot is the default config with one connection slot, so
// concurrent writes share round trips.
func onePoolSlot() Config {
	cfg := DefaultConfig()
	cfg.PoolSize = 1
	return cfg
}

// TestIsNoScriptAllocatesNothingOnSuccess: every write of a pipelined
// batch asks whether its reply was NOSCRIPT; for the common answer, no
// error, that must not cost an allocation.
func TestIsNoScriptAllocatesNothingOnSuccess(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { _ = isNoScript(nil) }); n != 0 {
		t.Errorf("isNoScript(nil): %v allocations, want 0", n)
	}
}
