package proxy

import (
	"testing"

	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/tokens"
)

// TestTermOver: the send check refuses a token whose term memory shows
// ended or passed, and lets the current one through.
func TestTermOver(t *testing.T) {
	src := election.NewMonotonic()
	g := &Gateway{terms: src}
	if _, _, err := src.Verify(t.Context(), "f", 7); err != nil {
		t.Fatal(err)
	}
	if r := g.termOver(backendPostgres, "f", 7); r != nil {
		t.Fatalf("the current token: got %v, want nil", r)
	}
	if r := g.termOver(backendPostgres, "f", 6); r == nil || r.Reason != tokens.ReasonStaleToken {
		t.Fatalf("a token below the term: got %v, want STALE_TOKEN", r)
	}
	g.trackers[backendRedis].Raise("f", 9)
	if r := g.termOver(backendRedis, "f", 7); r == nil || r.Reason != tokens.ReasonStaleToken {
		t.Fatalf("a token below the backend's mark: got %v, want STALE_TOKEN", r)
	}
	if r := g.termOver(backendPostgres, "f", 7); r != nil {
		t.Fatalf("the other backend's mark: got %v, want nil", r)
	}
}

// BenchmarkTermOver is what the send check adds to each write: about the
// cost of the admission's own look at memory.
func BenchmarkTermOver(b *testing.B) {
	src := election.NewMonotonic()
	g := &Gateway{terms: src}
	if _, _, err := src.Verify(b.Context(), "bench", 7); err != nil {
		b.Fatal(err)
	}
	g.trackers[backendPostgres].Raise("bench", 7)
	b.ReportAllocs()
	for b.Loop() {
		if r := g.termOver(backendPostgres, "bench", 7); r != nil {
			b.Fatal(r)
		}
	}
}
