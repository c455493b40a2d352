package coalesce

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type write struct {
	Call
	n      int
	result int
}

// gated runs batches only when released, recording each batch.
type gated struct {
	mu      sync.Mutex
	batches [][]int
	release chan struct{}
}

func (g *gated) run(calls []*write) {
	<-g.release
	g.mu.Lock()
	var ns []int
	for _, c := range calls {
		ns = append(ns, c.n)
	}
	g.batches = append(g.batches, ns)
	g.mu.Unlock()
	for _, c := range calls {
		c.result = c.n * 10
		c.Finish()
	}
}

func newWrite(ctx context.Context, n int) *write {
	w := &write{n: n}
	w.Init(ctx)
	return w
}

// waitQueued waits until q holds n queued calls.
func waitQueued(t *testing.T, q *Coalescer[*write], n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		q.mu.Lock()
		got := len(q.queue)
		q.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queued: got %d, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestQueuedCallsShareTheNextBatch(t *testing.T) {
	g := &gated{release: make(chan struct{})}
	q := New(1, 3, g.run)
	var wg sync.WaitGroup
	do := func(w *write) {
		wg.Go(func() {
			if got := q.Do(w); got != Finished {
				t.Errorf("call %d: got outcome %d, want Finished", w.n, got)
			}
			if w.result != w.n*10 {
				t.Errorf("call %d: got result %d, want %d", w.n, w.result, w.n*10)
			}
		})
	}
	do(newWrite(t.Context(), 0)) // takes the only slot
	for q.Free() != 0 {
		time.Sleep(time.Millisecond)
	}
	for n := 1; n <= 5; n++ {
		do(newWrite(t.Context(), n))
	}
	waitQueued(t, q, 5)
	close(g.release)
	wg.Wait()

	want := [][]int{{0}, {1, 2, 3}, {4, 5}}
	if len(g.batches) != len(want) {
		t.Fatalf("batches: got %v, want %v", g.batches, want)
	}
	// Queue order follows arrival, which the goroutines above do not fix:
	// check the sizes.
	for i := range want {
		if len(g.batches[i]) != len(want[i]) {
			t.Errorf("batch %d: got %v, want %d calls", i, g.batches[i], len(want[i]))
		}
	}
	if s := q.Stats(); s.Batches != 3 || s.Calls != 6 || s.Largest != 3 {
		t.Errorf("stats: got %+v, want 3 batches, 6 calls, largest 3", s)
	}
	// The slot is freed by the batch's goroutine after run returns, which
	// may be after the callers it finished have returned.
	for deadline := time.Now().Add(5 * time.Second); q.Free() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("free slots after: got %d, want 1", q.Free())
		}
	}
}

func TestCallerGivesUp(t *testing.T) {
	g := &gated{release: make(chan struct{})}
	q := New(1, 10, g.run)
	var wg sync.WaitGroup
	wg.Go(func() { q.Do(newWrite(t.Context(), 0)) })
	for q.Free() != 0 {
		time.Sleep(time.Millisecond)
	}

	// Queued, then given up: never run.
	ctx, cancel := context.WithCancel(t.Context())
	queued := newWrite(ctx, 1)
	out := make(chan Outcome, 1)
	wg.Go(func() { out <- q.Do(queued) })
	waitQueued(t, q, 1)
	cancel()
	if got := <-out; got != Abandoned {
		t.Errorf("given up while queued: got %d, want Abandoned", got)
	}
	waitQueued(t, q, 0)

	// Taken into a batch, then given up: the batch goes on.
	ctx2, cancel2 := context.WithCancel(t.Context())
	taken, other := newWrite(ctx2, 2), newWrite(t.Context(), 3)
	wg.Go(func() { out <- q.Do(taken) })
	wg.Go(func() {
		if got := q.Do(other); got != Finished {
			t.Errorf("other call: got %d, want Finished", got)
		}
	})
	waitQueued(t, q, 2)
	g.release <- struct{}{} // the first batch ends; the next is taken and waits
	waitQueued(t, q, 0)
	cancel2()
	if got := <-out; got != Orphaned {
		t.Errorf("given up in a batch: got %d, want Orphaned", got)
	}
	close(g.release)
	wg.Wait()
	if len(g.batches) != 2 || len(g.batches[1]) != 2 {
		t.Errorf("batches: got %v, want [[0] [2 3]] in some order", g.batches)
	}
}

func TestBatchContext(t *testing.T) {
	// run hands out the context of each batch of two and holds the batch
	// until released.
	ctxs, release := make(chan context.Context, 1), make(chan struct{})
	q := New(1, 10, func(calls []*write) {
		ctx, cancel := BatchContext(calls)
		defer cancel()
		if len(calls) == 2 {
			ctxs <- ctx
		} else if ctx != calls[0].Context() {
			t.Error("a lone call's batch context: got a new one, want the caller's")
		}
		<-release
		for _, c := range calls {
			c.Finish()
		}
	})
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { q.Do(newWrite(t.Context(), 0)) }) // takes the only slot
	for q.Free() != 0 {
		time.Sleep(time.Millisecond)
	}
	ctx1, cancel1 := context.WithCancel(t.Context())
	ctx2, cancel2 := context.WithCancel(t.Context())
	out := make(chan Outcome, 2)
	wg.Go(func() { out <- q.Do(newWrite(ctx1, 1)) })
	wg.Go(func() { out <- q.Do(newWrite(ctx2, 2)) })
	waitQueued(t, q, 2)
	release <- struct{}{} // the lone batch ends; the two go out together
	ctx := <-ctxs

	cancel1()
	if got := <-out; got != Orphaned {
		t.Errorf("first caller to give up: got %d, want Orphaned", got)
	}
	select {
	case <-ctx.Done():
		t.Fatal("batch context ended when one of two callers gave up")
	case <-time.After(20 * time.Millisecond):
	}
	cancel2()
	if got := <-out; got != Orphaned {
		t.Errorf("second caller to give up: got %d, want Orphaned", got)
	}
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("batch context still alive after every caller gave up")
	}
	close(release)
}

// TestCallReused: a call that Do reported Finished runs again as a new
// write, alone and in a batch, with nothing of its first run left over.
func TestCallReused(t *testing.T) {
	g := &gated{release: make(chan struct{})}
	close(g.release)
	q := New(1, 10, g.run)
	w := newWrite(t.Context(), 1)
	for n := 1; n <= 3; n++ {
		w.n = n
		w.Init(t.Context())
		if got := q.Do(w); got != Finished || w.result != n*10 {
			t.Fatalf("run %d: got outcome %d, result %d; want Finished, %d", n, got, w.result, n*10)
		}
	}
	select {
	case <-w.done:
		t.Fatal("a finished call holds a second signal: its next Do would return before its batch ran")
	default:
	}
}
