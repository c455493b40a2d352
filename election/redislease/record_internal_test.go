package redislease

import (
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/election"
)

// TestRecordOrderOfReadsInFlight: two reads in flight at once may run in
// Redis in either order. The one started later finding the older counter
// is no sign that the counter went back: no token is refused for it. A
// read started after another finished and finding a lower counter is.
func TestRecordOrderOfReadsInFlight(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"}) // never dialled
	t.Cleanup(func() { _ = c.Close() })
	s, err := New(c, Config{})
	if err != nil {
		t.Fatal(err)
	}
	const f = "orders"
	s.record(election.Term{Election: f, Rev: 2, Leader: "b", Last: 2}, s.startRead(f))

	// a and b start with counter 2 known; Redis runs b first (counter 2),
	// then the new leader's INCR, then a (counter 3); a finishes first.
	a, b := s.startRead(f), s.startRead(f)
	s.record(election.Term{Election: f, Rev: 3, Leader: "c", Last: 3}, a)
	s.record(election.Term{Election: f, Rev: 2, Leader: "b", Last: 2}, b)
	if s.floors[f] != 0 {
		t.Fatalf("reads in flight at once, finished out of order: floor %d, want none", s.floors[f])
	}
	if term := s.record(election.Term{Election: f, Rev: 3, Leader: "c", Last: 3}, s.startRead(f)); term.Rev != 3 {
		t.Fatalf("the leader of token 3 after reads out of order: %+v, want it leading", term)
	}

	// Started after those finished, a read finding counter 1: gone back.
	if term := s.record(election.Term{Election: f, Rev: 1, Leader: "d", Last: 1}, s.startRead(f)); term.Rev != 0 || s.floors[f] != 3 {
		t.Fatalf("counter 1 read after 3: %+v, floor %d; want no leader, floor 3", term, s.floors[f])
	}
}
