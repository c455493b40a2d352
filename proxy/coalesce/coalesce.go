// Package coalesce lets concurrent writes to one backend share round trips.
//
// A Coalescer has a fixed number of slots, each a batch in flight on one
// connection. A write that finds a slot free runs at once, alone, on its
// caller's goroutine: a lone writer pays nothing. A write that finds every
// slot busy queues; when a slot's batch ends, everything queued (up to the
// batch limit) goes out together as that slot's next batch, on a goroutine
// of its own so the finished caller can return. There is no timer: batches
// form only when the backend is the bottleneck, and as large as the queue
// has grown in one round trip.
//
// The backend's run function decides what a batch is; fencegate's
// backends send every write of a batch in one pipeline, each still its own
// transaction or script, so writes share a round trip, never an outcome.
package coalesce

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/fencegate/fencegate/tokens"
)

// Call is the part of a write the Coalescer uses. Embed it in the backend's
// own write type and call Init before Do.
//
// A Call may be used again for another write once Do has reported
// Finished or Abandoned (a backend may keep its calls in a sync.Pool). After
// Orphaned it must not be: the batch it is in still finishes it.
type Call struct {
	ctx context.Context
	// done carries Finish's signal to Do: buffered, so a batch never waits
	// for a caller, and made once per Call, not per write.
	done chan struct{}
	// taken and batch are guarded by Coalescer.mu: the call left the
	// queue for a batch, so it may be sent; batch is that batch when it
	// holds other calls too.
	taken bool
	batch *batch
	// left: the call was counted out of its batch (leave).
	left atomic.Bool
}

// Init prepares the call to run under ctx.
func (c *Call) Init(ctx context.Context) {
	c.ctx = ctx
	if c.done == nil {
		c.done = make(chan struct{}, 1)
	}
	c.taken, c.batch = false, nil
	c.left.Store(false)
}

// leave counts the call out of bt, its batch, once: its caller gave up
// (Do), or the batch finished it before sending it (Sift). The last call
// to leave ends the batch's I/O.
func (c *Call) leave(bt *batch) {
	if bt != nil && c.left.CompareAndSwap(false, true) && bt.left.Add(-1) == 0 {
		bt.cancel()
	}
}

// Context returns the caller's context.
func (c *Call) Context() context.Context { return c.ctx }

// Finish marks the call done, once. The batch sets the call's results
// first; the caller reads them after Do reports it finished.
func (c *Call) Finish() { c.done <- struct{}{} }

func (c *Call) base() *Call { return c }

// Caller is implemented by every type that embeds Call.
type Caller interface{ base() *Call }

// Outcome is what Do reports.
type Outcome int

const (
	// Finished means the batch finished the call; its results are set.
	Finished Outcome = iota
	// Abandoned means the caller's context ended while the call was
	// queued. Nothing of it was sent.
	Abandoned
	// Orphaned means the caller's context ended after the call was taken
	// into a batch. It may still be applied; the batch goes on without the
	// caller.
	Orphaned
)

// batch is the shared state of a batch of several calls: the context its
// I/O runs under, which ends once every caller has given up (Do, when an
// Orphaned caller leaves, counts it down).
type batch struct {
	ctx    context.Context
	cancel context.CancelFunc
	left   atomic.Int32
}

// Coalescer runs calls in batches; see the package doc.
type Coalescer[T Caller] struct {
	run      func([]T)
	maxBatch int

	mu    sync.Mutex
	free  int
	queue []T
	// lone holds a one-call batch for each free slot, so that a call run
	// alone does not allocate its batch.
	lone [][]T

	batches, calls atomic.Uint64
	largest        atomic.Int64
}

// New returns a Coalescer with slots batches in flight at most, each of at
// most maxBatch calls. run must finish every call it is given.
func New[T Caller](slots, maxBatch int, run func([]T)) *Coalescer[T] {
	q := &Coalescer[T]{run: run, maxBatch: max(1, maxBatch), free: max(1, slots)}
	q.lone = make([][]T, q.free)
	for i := range q.lone {
		q.lone[i] = make([]T, 1)
	}
	return q
}

// Do runs c, alone or in a batch, and reports how it ended.
func (q *Coalescer[T]) Do(c T) Outcome {
	b := c.base()
	q.mu.Lock()
	if q.free > 0 {
		q.free--
		b.taken = true
		lone := q.lone[len(q.lone)-1]
		q.lone = q.lone[:len(q.lone)-1]
		q.mu.Unlock()
		lone[0] = c
		q.runBatch(lone)
		<-b.done // sent by run's Finish, before it returned
		q.next(lone)
		return Finished
	}
	q.queue = append(q.queue, c)
	q.mu.Unlock()

	select {
	case <-b.done:
		return Finished
	case <-b.ctx.Done():
	}
	q.mu.Lock()
	if !b.taken {
		q.dequeueLocked(c)
		q.mu.Unlock()
		return Abandoned
	}
	bt := b.batch
	q.mu.Unlock()
	select {
	case <-b.done:
		return Finished
	default:
	}
	// Orphaned: the last caller of a batch to leave ends its I/O.
	b.leave(bt)
	return Orphaned
}

// Refusal is the refusal for a call Do did not finish, to the backend at
// addr: nothing sent (Abandoned), or an outcome nobody will learn
// (Orphaned). err is the caller's context error.
func Refusal(o Outcome, fence string, t tokens.Token, addr string, err error) *tokens.RefusalError {
	if o == Abandoned {
		r := tokens.Refuse(tokens.ReasonBackendUnavailable, fence, t, "no connection to %s", addr)
		r.Err = err
		return r
	}
	r := tokens.Refuse(tokens.ReasonBackendUnavailable, fence, t, "lost %s during the write", addr)
	r.Err = err
	r.Metadata = map[string]string{"outcome": "unknown"}
	return r
}

// Stats are counts since New.
type Stats struct {
	Batches uint64 // batches run, a lone call being a batch of one
	Calls   uint64 // calls in them
	Largest int    // the most calls in one batch
}

// Stats returns the Coalescer's counts.
func (q *Coalescer[T]) Stats() Stats {
	return Stats{Batches: q.batches.Load(), Calls: q.calls.Load(), Largest: int(q.largest.Load())}
}

// Queued returns the calls waiting for a slot, for tests.
func (q *Coalescer[T]) Queued() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queue)
}

// Free returns the slots not running a batch, for tests.
func (q *Coalescer[T]) Free() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.free
}

func (q *Coalescer[T]) runBatch(batch []T) {
	q.batches.Add(1)
	q.calls.Add(uint64(len(batch)))
	for n := int64(len(batch)); ; {
		cur := q.largest.Load()
		if n <= cur || q.largest.CompareAndSwap(cur, n) {
			break
		}
	}
	q.run(batch)
}

// next puts back the caller's one-call batch, and starts a batch of what
// queued while the caller's slot was busy, or frees the slot.
func (q *Coalescer[T]) next(lone []T) {
	var zero T
	lone[0] = zero
	q.mu.Lock()
	q.lone = append(q.lone, lone)
	if len(q.queue) == 0 {
		q.free++
		q.mu.Unlock()
		return
	}
	batch := q.takeLocked()
	q.mu.Unlock()
	go q.drain(batch)
}

// drain runs batches on one slot until the queue is empty.
func (q *Coalescer[T]) drain(batch []T) {
	for {
		q.runBatch(batch)
		q.mu.Lock()
		if len(q.queue) == 0 {
			q.free++
			q.mu.Unlock()
			return
		}
		batch = q.takeLocked()
		q.mu.Unlock()
	}
}

// takeLocked removes up to maxBatch calls from the head of the queue.
func (q *Coalescer[T]) takeLocked() []T {
	n := min(len(q.queue), q.maxBatch)
	batch := make([]T, n)
	copy(batch, q.queue)
	bt := newBatch(n)
	for _, c := range batch {
		c.base().taken = true
		c.base().batch = bt
	}
	rest := copy(q.queue, q.queue[n:])
	clear(q.queue[rest:])
	q.queue = q.queue[:rest]
	return batch
}

// dequeueLocked removes c, which is queued, from the queue.
func (q *Coalescer[T]) dequeueLocked(c T) {
	for i, x := range q.queue {
		if x.base() == c.base() {
			copy(q.queue[i:], q.queue[i+1:])
			clear(q.queue[len(q.queue)-1:])
			q.queue = q.queue[:len(q.queue)-1]
			return
		}
	}
}

// newBatch returns the shared state of a batch of n calls, or nil for a
// lone call, which runs under its caller's context.
func newBatch(n int) *batch {
	if n < 2 {
		return nil
	}
	bt := &batch{}
	bt.ctx, bt.cancel = context.WithCancel(context.Background())
	bt.left.Store(int32(n))
	return bt
}

// BatchContext returns the context the I/O of calls, a batch Do formed,
// runs under: a lone call's own, or one that ends when every call of the
// batch has been given up by its caller. One impatient caller must not
// abort the others' writes; when all have left, the I/O is abandoned as it
// would be for one. Call the CancelFunc when the batch is done.
func BatchContext[T Caller](calls []T) (context.Context, context.CancelFunc) {
	bt := calls[0].base().batch
	if bt == nil {
		return calls[0].base().ctx, noCancel
	}
	return bt.ctx, bt.cancel
}

func noCancel() {}

// SendCheck says whether a write of fence with token t may still be sent:
// nil, or the refusal it gets instead. A write can wait in a queue, and for
// a connection, long enough for its term to end; fencegate's memory of the
// terms decides again as it leaves (Recheck).
type SendCheck func(fence string, t tokens.Token) *tokens.RefusalError

// Recheck holds a backend's SendCheck, set once by the gateway that owns
// the backend; without one every write is sent.
type Recheck struct{ f atomic.Pointer[SendCheck] }

// Set makes f the check.
func (r *Recheck) Set(f SendCheck) { r.f.Store(&f) }

// Sendable is a Caller the send check decides on (Sift).
type Sendable interface {
	Caller
	// Fenced returns the write's fence and token.
	Fenced() (fence string, t tokens.Token)
	// Refuse finishes the call with r, nothing sent.
	Refuse(r *tokens.RefusalError)
}

// Sift returns calls, a batch Do formed, without those r's check refuses.
// Each refused call leaves the batch, as one whose caller gave up does,
// so that the batch's I/O ends once every call it still sends is given
// up, and is then finished with its refusal. Sift copies calls only when
// it drops one.
func Sift[T Sendable](r *Recheck, calls []T) []T {
	f := r.f.Load()
	if f == nil {
		return calls
	}
	drop := func(c T) bool {
		refusal := (*f)(c.Fenced())
		if refusal == nil {
			return false
		}
		b := c.base()
		b.leave(b.batch) // before Refuse: once finished, c may be reused
		c.Refuse(refusal)
		return true
	}
	for i, c := range calls {
		if !drop(c) {
			continue
		}
		kept := append(make([]T, 0, len(calls)-1), calls[:i]...)
		for _, c := range calls[i+1:] {
			if !drop(c) {
				kept = append(kept, c)
			}
		}
		return kept
	}
	return calls
}
