package proxy

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// verifyLimiter bounds the linearizable etcd reads made to verify tokens
// above everything a replica knows. Every forged token costs one, so without
// a bound anyone who can reach fencegate can make it hammer etcd. Each fence
// has a token bucket of its own, so a flood on one fence leaves the others
// their budget. At most max fences have one: when the table is full, the
// buckets that have refilled are dropped (a new bucket is the same), at most
// once per refill period so a full table of busy buckets is not scanned on
// every call; until there is room, other fences share one overflow bucket.
// Safe for concurrent use; no I/O happens under its lock.
type verifyLimiter struct {
	rate   rate.Limit
	burst  int
	max    int
	refill time.Duration // for an empty bucket to fill up

	mu       sync.Mutex
	fences   map[string]*rate.Limiter
	overflow *rate.Limiter
	swept    time.Time
}

func newVerifyLimiter(perSecond float64, burst, maxFences int) *verifyLimiter {
	return &verifyLimiter{
		rate:     rate.Limit(perSecond),
		burst:    burst,
		max:      maxFences,
		refill:   time.Duration(float64(burst) / perSecond * float64(time.Second)),
		fences:   make(map[string]*rate.Limiter),
		overflow: rate.NewLimiter(rate.Limit(perSecond), burst),
	}
}

// allow takes one verification from fence's bucket at now and reports
// whether there was one.
func (l *verifyLimiter) allow(fence string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.fences[fence]
	if !ok {
		if len(l.fences) >= l.max {
			l.sweep(now)
		}
		if len(l.fences) >= l.max {
			return l.overflow.AllowN(now, 1)
		}
		b = rate.NewLimiter(l.rate, l.burst)
		l.fences[fence] = b
	}
	return b.AllowN(now, 1)
}

// sweep drops the buckets that are full again. l.mu must be held.
func (l *verifyLimiter) sweep(now time.Time) {
	if !l.swept.IsZero() && now.Sub(l.swept) < l.refill {
		return
	}
	l.swept = now
	for f, b := range l.fences {
		if b.TokensAt(now) >= float64(l.burst) {
			delete(l.fences, f)
		}
	}
}
