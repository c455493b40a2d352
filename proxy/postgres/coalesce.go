package postgres

import (
	"context"
	"sync/atomic"

	"github.com/fencegate/fencegate/tokens"
)

// Concurrent writes are coalesced: each connection carries a batch of
// writes per round trip, each write its own implicit transaction ended by
// its own Sync. PostgreSQL runs them one after the other, as it would on
// separate connections, but reads them with one system call and answers
// them with one; fencegate sends and reads them with one each. On this
// project's 2-core machine that halves PostgreSQL's CPU per write (see
// docs/BENCHMARKS.md).
//
// There is no timer and no batching goroutine. A write that finds a
// connection slot free runs alone, on its own goroutine, at once: a lone
// writer pays nothing. A write that finds every slot busy queues; when a
// slot's batch ends, everything queued (up to maxBatch) goes out together
// on that slot's next round trip.

// maxBatch bounds the writes sent in one round trip. A larger batch makes
// its last write wait for more transactions ahead of it.
const maxBatch = 16

// call is one fenced write on its way through a batch.
type call struct {
	ctx   context.Context
	fence string
	token tokens.Token
	stmts []Statement

	// Set by the batch before done is closed.
	results []Result
	err     error
	done    chan struct{}

	// taken is guarded by Backend.mu: the write has left the queue for a
	// batch, so it may be sent.
	taken bool
}

// finish hands the call its outcome.
func (c *call) finish(results []Result, err error) {
	c.results, c.err = results, err
	close(c.done)
}

// submit runs c, alone or in a batch, and returns its outcome.
func (b *Backend) submit(c *call) ([]Result, error) {
	b.mu.Lock()
	if b.free > 0 {
		b.free--
		c.taken = true
		b.mu.Unlock()
		b.runBatch([]*call{c})
		b.next()
		return c.results, c.err
	}
	b.queue = append(b.queue, c)
	b.mu.Unlock()

	select {
	case <-c.done:
		return c.results, c.err
	case <-c.ctx.Done():
	}
	b.mu.Lock()
	if !c.taken {
		b.dequeueLocked(c)
		b.mu.Unlock()
		r := tokens.Refuse(tokens.ReasonBackendUnavailable, c.fence, c.token, "no connection to %s", b.host)
		r.Err = c.ctx.Err()
		return nil, r
	}
	b.mu.Unlock()
	select {
	case <-c.done:
		// Finished while we looked: the outcome is known.
		return c.results, c.err
	default:
	}
	// Sent, or about to be: it may commit all the same. The batch goes on
	// for the others and drops this call's outcome.
	r := tokens.Refuse(tokens.ReasonBackendUnavailable, c.fence, c.token, "lost %s during the write", b.host)
	r.Err = c.ctx.Err()
	r.Metadata = map[string]string{"outcome": "unknown"}
	return nil, r
}

// next starts a batch of what queued while the caller's slot was busy, or
// frees the slot.
func (b *Backend) next() {
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.free++
		b.mu.Unlock()
		return
	}
	batch := b.takeLocked()
	b.mu.Unlock()
	// The caller returns its own answer now; the slot carries on here.
	go b.drain(batch)
}

// drain runs batches on one slot until the queue is empty.
func (b *Backend) drain(batch []*call) {
	for {
		b.runBatch(batch)
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.free++
			b.mu.Unlock()
			return
		}
		batch = b.takeLocked()
		b.mu.Unlock()
	}
}

// takeLocked removes up to maxBatch calls from the head of the queue.
func (b *Backend) takeLocked() []*call {
	n := min(len(b.queue), maxBatch)
	b.largestBatch = max(b.largestBatch, n)
	batch := make([]*call, n)
	copy(batch, b.queue)
	for _, c := range batch {
		c.taken = true
	}
	rest := copy(b.queue, b.queue[n:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
	return batch
}

// dequeueLocked removes c, which is queued, from the queue.
func (b *Backend) dequeueLocked(c *call) {
	for i, q := range b.queue {
		if q == c {
			copy(b.queue[i:], b.queue[i+1:])
			b.queue[len(b.queue)-1] = nil
			b.queue = b.queue[:len(b.queue)-1]
			return
		}
	}
}

// batchContext returns the context a batch's I/O runs under: a lone write's
// own, or one that ends when every write of the batch has been given up by
// its caller. One impatient caller must not abort the others' writes; when
// all have left, the connection is closed as it would be for one.
func batchContext(calls []*call) (context.Context, context.CancelFunc) {
	if len(calls) == 1 {
		return calls[0].ctx, func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var left atomic.Int32
	left.Store(int32(len(calls)))
	stops := make([]func() bool, len(calls))
	for i, c := range calls {
		stops[i] = context.AfterFunc(c.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}
