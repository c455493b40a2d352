package zookeeper

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/tokens"
)

// TestPublishRewind: a read sent after the last one published that shows
// the election's pzxid going back is a rewound ZooKeeper: every term up to
// the highest zxid read in the connections before is refused TERM_ENDED,
// whoever holds it, and memory follows the new history. The zxids read in
// the rewound connection itself do not raise the floor.
func TestPublishRewind(t *testing.T) {
	var logs bytes.Buffer
	var changes []election.Term
	s := &Source{
		terms:    map[string]election.Term{},
		watched:  map[string]bool{"f": true, "g": true},
		log:      slog.New(slog.NewTextHandler(&logs, nil)),
		onChange: func(_, next election.Term) { changes = append(changes, next) },
	}
	leader := func(seq, conn uint64, pzxid, czxid int64) state {
		return state{seq: seq, conn: conn, exists: true, pzxid: pzxid, czxid: czxid, leader: "/e/x/latch-0000000001", data: "w"}
	}
	for _, step := range []struct {
		name      string
		election  string
		st        state
		rev, last int64
		floor     int64
	}{
		{"A: f leads at 90", "f", leader(1, 1, 100, 90), 90, 90, 0},
		{"A: g leads at 70", "g", leader(2, 1, 80, 70), 70, 70, 0},
		{"B: g ahead of A (a new leader at 150)", "g", leader(3, 2, 200, 150), 150, 150, 0},
		{"B: f behind A (w0 at 10): rewound", "f", leader(4, 2, 20, 10), 0, 90, 100},
		{"an older read of f, folded late", "f", leader(3, 1, 100, 90), 0, 90, 100},
		{"B: f's new leader past the floor", "f", leader(5, 2, 130, 120), 120, 120, 100},
		{"B: g's reissued term, read later", "g", leader(6, 2, 60, 40), 0, 150, 100},
	} {
		s.publish(step.election, step.st)
		got := s.Term(step.election)
		if got.Rev != step.rev || got.Last != step.last || s.floor != step.floor {
			t.Fatalf("%s: got Rev %d Last %d floor %d, want Rev %d Last %d floor %d",
				step.name, got.Rev, got.Last, s.floor, step.rev, step.last, step.floor)
		}
		if step.name == "B: f behind A (w0 at 10): rewound" {
			for _, tok := range []int64{90, 10} {
				if o := tokens.Decide(tokens.Token(tok), 0, got); o != tokens.Ended {
					t.Fatalf("after the rewind: token %d decided %v, want %v", tok, o, tokens.Ended)
				}
			}
		}
	}
	if n := strings.Count(logs.String(), "history went back"); n != 1 {
		t.Fatalf("got %d warnings of the rewind, want 1:\n%s", n, logs.String())
	}
	if len(changes) == 0 || changes[len(changes)-1].Rev != 0 || changes[len(changes)-1].Election != "g" {
		t.Fatalf("got changes %+v, want the last to end g's reissued term", changes)
	}
}
