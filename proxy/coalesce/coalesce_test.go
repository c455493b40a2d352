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
	ctx1, cancel1 := context.WithCancel(t.Context())
	ctx2, cancel2 := context.WithCancel(t.Context())
	calls := []*write{newWrite(ctx1, 1), newWrite(ctx2, 2)}
	ctx, cancel := BatchContext(calls)
	defer cancel()
	cancel1()
	select {
	case <-ctx.Done():
		t.Fatal("batch context ended when one of two callers gave up")
	case <-time.After(20 * time.Millisecond):
	}
	cancel2()
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("batch context still alive after every caller gave up")
	}

	lone := []*write{newWrite(t.Context(), 3)}
	if got, _ := BatchContext(lone); got != lone[0].Context() {
		t.Error("a lone call's batch context: got a new one, want the caller's")
	}
}
