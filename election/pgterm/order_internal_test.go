package pgterm

import (
	"log/slog"
	"testing"

	"github.com/fencegate/fencegate/election"
)

// TestStoreKeepsLaterRead: a poll that started before a Verify, read the
// row in the gap between two leaders (no lock held, term 4) and finished
// after the Verify stored the next leader (term 5, held), does not end
// term 5 in memory: its leader would be refused TERM_ENDED until the next
// poll. Its Last still counts, and a rewind it proves still raises the
// floor.
func TestStoreKeepsLaterRead(t *testing.T) {
	s := &Source{
		log:   slog.New(slog.DiscardHandler),
		terms: map[string]election.Term{}, shared: map[string]string{}, floors: map[string]int64{}, storedAt: map[string]uint64{},
	}
	s.store("e", 4, true, nil, 0, 1)
	// The poll (read 2) starts; then the Verify (read 3) starts, reads and
	// stores; then the poll's older snapshot comes in.
	s.store("e", 5, true, nil, 4, 3)
	got := s.store("e", 4, false, nil, 4, 2)
	if got.Rev != 5 || s.Term("e").Rev != 5 {
		t.Fatalf("after the earlier-started poll: got %+v, memory %+v, want term 5 leading", got, s.Term("e"))
	}
	if s.Term("e").Last != 5 {
		t.Fatalf("Last: got %d, want 5", s.Term("e").Last)
	}
	// A later read is taken as it is: the term ended.
	if got := s.store("e", 5, false, nil, 5, 4); got.Rev != 0 || got.Last != 5 {
		t.Fatalf("a later read of the lock released: got %+v, want no leader, Last 5", got)
	}
	// An earlier-started read that proves a rewind (term 2 below the 5
	// read before it started) still raises the floor.
	s.store("e", 6, true, nil, 5, 6)
	if got := s.store("e", 2, true, nil, 6, 5); got.Rev != 0 {
		t.Fatalf("a rewind seen by an earlier-started read: got %+v, want term 6 refused (floor 6)", got)
	}
}
