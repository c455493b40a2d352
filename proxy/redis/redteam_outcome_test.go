package redis

import (
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/tokens"
)

// Red team, outcome honesty: each write INCRements a counter of its own;
// afterwards the counter must be 1 for an accepted write, 0 for a definite
// refusal, 0 or 1 for an unknown outcome, and never 2 (run twice).

// rtoQueueLen is the number of writes waiting in b's coalescer.
func rtoQueueLen(b *Backend) int { return b.co.Queued() }

func rtoWaitQueued(t *testing.T, b *Backend, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); rtoQueueLen(b) < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("queued: got %d, want %d", rtoQueueLen(b), n)
		}
	}
}

func rtoHonest(t *testing.T, name string, err error, counter string) {
	t.Helper()
	switch counter {
	case "", "0", "1":
	default:
		t.Errorf("%s: counter %q: the write ran more than once", name, counter)
	}
	ran := counter == "1"
	if err == nil {
		if !ran {
			t.Errorf("%s: answered accepted, counter %q (acknowledged write not applied)", name, counter)
		}
		return
	}
	r, ok := tokens.AsRefusal(err)
	if !ok {
		t.Errorf("%s: answered %v (%T), not a refusal", name, err, err)
		return
	}
	if r.Metadata["outcome"] == "unknown" {
		t.Logf("%s: outcome unknown (ran: %v): %v", name, ran, err)
		return
	}
	if ran {
		t.Errorf("%s: answered a definite refusal %s (%v), but the write WAS applied", name, r.Reason, err)
		return
	}
	t.Logf("%s: refused %s, nothing applied (honest): %v", name, r.Reason, err)
}

// rtoPausedBatch pauses the server (SIGSTOP), sends one write alone and
// queues n more behind it (one pipeline), runs during() while the server
// is still paused, then resumes it and returns every answer with the
// fences written.
func rtoPausedBatch(t *testing.T, b *Backend, n int, during func()) ([]string, []error) {
	t.Helper()
	fences := make([]string, n+1)
	errs := make([]error, n+1)
	for i := range fences {
		fences[i] = unique("rto")
	}
	pid := server.PID()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	defer resume()
	var wg sync.WaitGroup
	for i, f := range fences {
		wg.Go(func() {
			_, errs[i] = b.Exec(t.Context(), f, 1, [][]string{{"INCR", key(f, "n")}})
		})
		if i == 0 {
			for deadline := time.Now().Add(10 * time.Second); b.co.Free() != 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("slot never taken")
				}
			}
		} else {
			rtoWaitQueued(t, b, i)
		}
	}
	if during != nil {
		during()
	}
	resume()
	wg.Wait()
	return fences, errs
}

// TestRedTeamOutcomeScriptFlushWhilePipelined: SCRIPT FLUSH reaches the
// server (paused, so its order against the writes is the server's) while
// a write is in flight and four more are pipelined behind it; writes that
// find the script gone fall back to EVAL. None may run twice, and each
// answer must match the counter.
func TestRedTeamOutcomeScriptFlushWhilePipelined(t *testing.T) {
	b := openBackend(t, onePoolSlot())
	db := admin(t)
	if err := db.Ping(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	flushed := make(chan error, 1)
	fences, errs := rtoPausedBatch(t, b, 4, func() {
		go func() { flushed <- db.ScriptFlush(t.Context()).Err() }()
		time.Sleep(50 * time.Millisecond) // the FLUSH is in the server's socket
	})
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	for i, f := range fences {
		rtoHonest(t, f, errs[i], db.Get(t.Context(), key(f, "n")).Val())
	}
	if s := b.Stats(); s.Largest < 2 {
		t.Logf("stats %+v: the writes were not pipelined together", s)
	}
}

// TestRedTeamOutcomeReadTimeoutWhilePaused: the server is paused past the
// backend's ReadTimeout with one write in flight and four pipelined
// behind it. The answers come back without the server; when it resumes
// it may still run what was sent.
func TestRedTeamOutcomeReadTimeoutWhilePaused(t *testing.T) {
	cfg := onePoolSlot()
	cfg.ReadTimeout = 300 * time.Millisecond
	b := openBackend(t, cfg)
	db := admin(t)
	fences, errs := rtoPausedBatch(t, b, 4, func() { time.Sleep(1500 * time.Millisecond) })
	// Until the server has read what was sent before the connections
	// closed.
	time.Sleep(300 * time.Millisecond)
	if err := db.Ping(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	for i, f := range fences {
		rtoHonest(t, f, errs[i], db.Get(t.Context(), key(f, "n")).Val())
	}
	// The backend writes again.
	f := unique("rto_after")
	_, err := b.Exec(t.Context(), f, 1, [][]string{{"INCR", key(f, "n")}})
	rtoHonest(t, f, err, db.Get(t.Context(), key(f, "n")).Val())
}
