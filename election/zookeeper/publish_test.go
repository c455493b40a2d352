package zookeeper

import (
	"testing"

	"github.com/fencegate/fencegate/election"
)

// TestPublishOrder: reads are folded newest-wins by the election's pzxid.
// A Verify read that answered before a watch read but is folded after it
// must not bring back a leader that has gone; a read with no leader is
// always taken (at worst the next write verifies).
func TestPublishOrder(t *testing.T) {
	s := &Source{terms: map[string]election.Term{}, watched: map[string]bool{"f": true}}
	for _, step := range []struct {
		name      string
		st        state
		rev, last int64
	}{
		{"leader 5", state{exists: true, pzxid: 10, czxid: 5, leader: "/e/f/latch-0000000001"}, 5, 5},
		{"leader 5 gone", state{exists: true, pzxid: 12}, 0, 5},
		{"an older read of leader 5, folded late", state{exists: true, pzxid: 10, czxid: 5, leader: "/e/f/latch-0000000001"}, 0, 5},
		{"leader 13", state{exists: true, pzxid: 13, czxid: 13, leader: "/e/f/latch-0000000002"}, 13, 13},
		{"an older read with no leader, folded late", state{exists: true, pzxid: 12}, 13, 13},
		{"leader 13 read again", state{exists: true, pzxid: 13, czxid: 13, leader: "/e/f/latch-0000000002"}, 13, 13},
	} {
		s.publish("f", step.st)
		if got := s.Term("f"); got.Rev != step.rev || got.Last != step.last {
			t.Fatalf("%s: got Rev %d Last %d, want Rev %d Last %d", step.name, got.Rev, got.Last, step.rev, step.last)
		}
	}
}

// TestPublishUnwatched: past MaxElections an election is not watched, so
// memory keeps nothing of it that could go stale.
func TestPublishUnwatched(t *testing.T) {
	s := &Source{terms: map[string]election.Term{}, watched: map[string]bool{}}
	got := s.publish("f", state{exists: true, pzxid: 10, czxid: 5})
	if got.Rev != 5 {
		t.Fatalf("got Rev %d from the read, want 5", got.Rev)
	}
	if got := s.Term("f"); got.Rev != 0 || got.Last != 0 {
		t.Fatalf("got memory Rev %d Last %d, want nothing kept", got.Rev, got.Last)
	}
}
