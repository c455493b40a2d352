package election

import (
	"fmt"
	"testing"
)

// TestMonotonicBound: a Monotonic source remembers at most max names; a
// name forgotten is learnt again by its next verified token, and a
// remembered one keeps its term.
func TestMonotonicBound(t *testing.T) {
	ctx := t.Context()
	m := NewMonotonic()
	m.max = 4
	if _, _, err := m.Verify(ctx, "keep", 50); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		got, held, err := m.Verify(ctx, fmt.Sprint("n", i), int64(i+1))
		if err != nil || !held || got.Rev != int64(i+1) {
			t.Fatalf("Verify(n%d, %d): got %+v, %v, %v; want term %d, held", i, i+1, got, held, err, i+1)
		}
		if n := len(m.Terms()); n > m.max {
			t.Fatalf("after %d names: got %d terms, want at most %d", i+2, n, m.max)
		}
	}
	// Forgotten or not, a token is held, and the term is never below it.
	got, held, _ := m.Verify(ctx, "keep", 40)
	if !held || got.Rev < 40 {
		t.Fatalf("Verify(keep, 40): got %+v, %v; want a term of at least 40, held", got, held)
	}
	if r := m.Term("keep").Rev; r != got.Rev {
		t.Fatalf("Term(keep): got %d, want the verified %d", r, got.Rev)
	}
	// A name remembered keeps its highest term.
	_, _, _ = m.Verify(ctx, "keep", 60)
	if got, _, _ := m.Verify(ctx, "keep", 55); got.Rev != 60 {
		t.Fatalf("Verify(keep, 55) after 60: got term %d, want 60", got.Rev)
	}
}

func TestRouterFromTokens(t *testing.T) {
	routes, err := ParseRoutes("lease-*=monotonic")
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRouter(fixed{rev: 3}, routes, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"lease-a": true, "jobs": false} {
		if got := r.FromTokens(name); got != want {
			t.Errorf("FromTokens(%q): got %v, want %v", name, got, want)
		}
	}
}
