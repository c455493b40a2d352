package proxy

import (
	"strings"
	"sync"
	"time"

	"github.com/fencegate/fencegate/tokens"
)

// A zombie leader retrying in a loop is refused thousands of times a
// second, each time for the same reason with the same token. One log line
// per refusal would flood the logs and cost more than the refusal itself,
// so identical refusals (same backend, fence, reason and token) are logged
// at most once per refusalLogInterval; the line says how many were left out
// since the one before. Every refusal is still counted in the metrics, and
// a new token, fence or reason is logged at once.
const (
	refusalLogInterval = time.Second
	// refusalLogKeys bounds the refusals remembered; past it, those not
	// logged within the interval are forgotten, or all if none is.
	refusalLogKeys = 4096
)

type refusalKey struct {
	backend int
	fence   string // bounded: Gateway.shownFence
	reason  tokens.Reason
	token   tokens.Token
}

type refusalSeen struct {
	logged     time.Time
	suppressed uint64
}

// refusalLog decides which refusals are logged. Safe for concurrent use;
// no I/O happens under its lock.
type refusalLog struct {
	mu sync.Mutex
	// seen holds pointers so that counting a suppressed refusal does not
	// store its key again: the map keeps the copy made when it was added.
	seen map[refusalKey]*refusalSeen
}

// admit reports whether the refusal k, seen at now, is logged, and if so
// how many identical refusals were not logged since the last line.
func (l *refusalLog) admit(k refusalKey, now time.Time) (bool, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s, ok := l.seen[k]; ok {
		if now.Sub(s.logged) < refusalLogInterval {
			s.suppressed++
			return false, 0
		}
		n := s.suppressed
		*s = refusalSeen{logged: now}
		return true, n
	}
	if l.seen == nil {
		l.seen = make(map[refusalKey]*refusalSeen)
	}
	if len(l.seen) >= refusalLogKeys {
		for key, v := range l.seen {
			if now.Sub(v.logged) >= refusalLogInterval {
				delete(l.seen, key)
			}
		}
		if len(l.seen) >= refusalLogKeys {
			clear(l.seen)
		}
	}
	// Not a view into a larger buffer the map would keep alive.
	k.fence = strings.Clone(k.fence)
	l.seen[k] = &refusalSeen{logged: now}
	return true, 0
}
