package redis

import (
	"sync"
	"sync/atomic"

	"github.com/fencegate/fencegate/tokens"
)

// Fence is the stored state of one fence.
type Fence struct {
	Name      string
	HighWater tokens.Token
}

// TokenKey returns the key holding fence's high-water mark:
// fencegate:{<fence>}:token.
func TokenKey(fence string) string {
	return reservedPrefix + "{" + fence + "}:token"
}

// fenceArgs keeps, per fence, the script arguments every write of the
// fence sends, boxed: its token key, and the last token written with, in
// decimal. A leader's writes then build neither. It holds maxArgFences
// fences at most; the writes of any beyond build theirs each time.
type fenceArgs struct {
	mu sync.RWMutex
	m  map[string]*fenceArg
}

type fenceArg struct {
	key any // TokenKey(fence)
	tok atomic.Pointer[tokenArg]
}

type tokenArg struct {
	t   tokens.Token
	arg any // t.String()
}

const maxArgFences = 4096

// of returns fence's token key and t in decimal, boxed.
func (a *fenceArgs) of(fence string, t tokens.Token) (key, tok any) {
	a.mu.RLock()
	f := a.m[fence]
	a.mu.RUnlock()
	if f == nil {
		f = a.add(fence)
	}
	if ta := f.tok.Load(); ta != nil && ta.t == t {
		return f.key, ta.arg
	}
	ta := &tokenArg{t: t, arg: t.String()}
	f.tok.Store(ta)
	return f.key, ta.arg
}

// add returns fence's entry, kept unless the map is full.
func (a *fenceArgs) add(fence string) *fenceArg {
	f := &fenceArg{key: TokenKey(fence)}
	a.mu.Lock()
	defer a.mu.Unlock()
	if g := a.m[fence]; g != nil {
		return g
	}
	if a.m == nil {
		a.m = make(map[string]*fenceArg)
	}
	if len(a.m) < maxArgFences {
		a.m[fence] = f
	}
	return f
}
