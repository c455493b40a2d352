package tokens

import (
	"sync"
	"sync/atomic"
)

// Tracker is the per-fence in-memory high-water mark: the highest token this
// process has seen accepted or reported by a backend for each fence. It is an
// optimisation for refusing stale tokens without a backend round trip;
// correctness never depends on it. The zero Tracker is ready to use and safe
// for concurrent use; reads and raises take no lock.
type Tracker struct {
	fences sync.Map // string -> *atomic.Uint64
}

// HighWater returns the highest token seen for fence, or 0.
func (tr *Tracker) HighWater(fence string) Token {
	if v, ok := tr.fences.Load(fence); ok {
		return Token(v.(*atomic.Uint64).Load())
	}
	return 0
}

// Raise raises fence's high-water mark to t if t is higher.
func (tr *Tracker) Raise(fence string, t Token) {
	v, ok := tr.fences.Load(fence)
	if !ok {
		v, _ = tr.fences.LoadOrStore(fence, new(atomic.Uint64))
	}
	hw := v.(*atomic.Uint64)
	for {
		cur := hw.Load()
		if uint64(t) <= cur || hw.CompareAndSwap(cur, uint64(t)) {
			return
		}
	}
}

// Range calls f for every fence with its high-water mark, in no order.
func (tr *Tracker) Range(f func(fence string, hw Token)) {
	tr.fences.Range(func(k, v any) bool {
		f(k.(string), Token(v.(*atomic.Uint64).Load()))
		return true
	})
}
