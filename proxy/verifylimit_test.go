package proxy

import (
	"fmt"
	"testing"
	"time"
)

func TestVerifyLimiter(t *testing.T) {
	l := newVerifyLimiter(1, 2, 100) // 2 at once, one more a second
	t0 := time.Unix(1000, 0)
	steps := []struct {
		fence string
		at    time.Duration
		want  bool
	}{
		{"a", 0, true},
		{"a", 0, true},
		{"a", 0, false},
		{"a", 500 * time.Millisecond, false},
		// Another fence has its own bucket.
		{"b", 500 * time.Millisecond, true},
		{"a", time.Second, true},
		{"a", time.Second, false},
		{"a", 3 * time.Second, true},
		{"a", 3 * time.Second, true},
		{"a", 3 * time.Second, false},
	}
	for i, s := range steps {
		if got := l.allow(s.fence, t0.Add(s.at)); got != s.want {
			t.Errorf("step %d (%s at %v): got %v, want %v", i, s.fence, s.at, got, s.want)
		}
	}
}

// However many fences are tried, at most max buckets are kept, and the
// fences beyond share one bucket instead of each getting a fresh one.
func TestVerifyLimiterBounded(t *testing.T) {
	const maxFences = 8
	l := newVerifyLimiter(1, 2, maxFences)
	t0 := time.Unix(1000, 0)
	allowed := 0
	for i := range 1000 {
		if l.allow(fmt.Sprintf("f%d", i), t0) {
			allowed++
		}
		if len(l.fences) > maxFences {
			t.Fatalf("after %d fences: got %d buckets, want at most %d", i+1, len(l.fences), maxFences)
		}
	}
	// maxFences fences with their own bucket, then 2 from the shared one.
	if want := maxFences + 2; allowed != want {
		t.Errorf("1000 fences at once: got %d verifications allowed, want %d", allowed, want)
	}
	// A fence with a bucket keeps it.
	if !l.allow("f0", t0) {
		t.Errorf("f0's second verification: got refused, want its own bucket's")
	}
	// Once the buckets have refilled, they are dropped to make room.
	later := t0.Add(3 * time.Second)
	if !l.allow("new", later) {
		t.Errorf("new fence after the buckets refilled: got refused, want allowed")
	}
	if _, ok := l.fences["new"]; !ok {
		t.Errorf("new fence after the buckets refilled: got no bucket of its own, want one")
	}
}

// A table full of busy buckets is scanned at most once per refill period.
func TestVerifyLimiterSweepsOncePerRefill(t *testing.T) {
	l := newVerifyLimiter(1, 1, 2)
	t0 := time.Unix(1000, 0)
	l.allow("a", t0)
	l.allow("b", t0)
	l.allow("c", t0) // full: sweeps, nothing refilled
	if !l.swept.Equal(t0) {
		t.Fatalf("got last sweep %v, want %v", l.swept, t0)
	}
	l.allow("d", t0.Add(500*time.Millisecond))
	if !l.swept.Equal(t0) {
		t.Errorf("half a refill later: got a sweep at %v, want none after %v", l.swept, t0)
	}
}
