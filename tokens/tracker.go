package tokens

import (
	"sync"
	"sync/atomic"

	"github.com/fencegate/fencegate/election"
)

// Tracker is the per-fence in-memory high-water mark of one backend: the
// highest token this process has seen it accept or report for each fence.
// It is an optimisation for refusing stale tokens without a backend round
// trip; correctness never depends on it. Keep one Tracker per backend: each
// backend's mark is its own, and one backend's (possibly tampered) mark must
// never refuse writes to another. The zero Tracker is ready to use and safe
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

// RaiseWithin raises fence's mark to hw as Raise does, unless hw is above
// ceiling, and reports whether it was within. A backend reports its mark
// when it refuses a token. A mark above every term the term source has shown
// (see Ceiling) was accepted for no leader known here: it was tampered with
// or forged in the backend, or comes from a term the watch has not delivered
// yet. Trusting it would refuse the real leader from memory until restart,
// so it is left out.
func (tr *Tracker) RaiseWithin(fence string, hw, ceiling Token) bool {
	if hw > ceiling {
		return false
	}
	tr.Raise(fence, hw)
	return true
}

// Ceiling is the highest term that term shows: no leader known to the term
// source held a higher one, so no backend can legitimately hold a higher
// high-water mark for the election's fence.
func Ceiling(term election.Term) Token {
	return Token(max(term.Rev, term.Last, 0))
}

// Range calls f for every fence with its high-water mark, in no order.
func (tr *Tracker) Range(f func(fence string, hw Token)) {
	tr.fences.Range(func(k, v any) bool {
		f(k.(string), Token(v.(*atomic.Uint64).Load()))
		return true
	})
}

// Lower lowers fence's high-water mark to t if it is higher: only when the
// fence was reset on purpose (a poisoned mark), never from a backend's
// answer.
func (tr *Tracker) Lower(fence string, t Token) {
	v, ok := tr.fences.Load(fence)
	if !ok {
		return
	}
	hw := v.(*atomic.Uint64)
	for {
		cur := hw.Load()
		if uint64(t) >= cur || hw.CompareAndSwap(cur, uint64(t)) {
			return
		}
	}
}
