package zookeeper

import (
	"testing"

	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/tokens"
)

// TestRedTeam7StaleNoLeaderReadEndsCurrentTerm: publish takes a read that
// found no leader even when it is older (lower pzxid) than the read
// published already, "at worst it makes the next write verify". It does
// not: the current leader's token is then at or below Last with no leader
// in memory, which tokens.Decide answers Ended from memory, and a
// zookeeper fence has no Freshness and no read-before-use, so the gateway
// refuses the current leader TERM_ENDED without asking ZooKeeper, until
// the next change of the election's children (with a settled latch:
// indefinitely).
//
// The interleaving is a real one: a Verify (say of a token above memory,
// while the election has no leader) syncs and reads no leader at pzxid
// 12; meanwhile leader 13 is created, the child watch fires, reads it and
// publishes it; then the Verify's read is folded.
func TestRedTeam7StaleNoLeaderReadEndsCurrentTerm(t *testing.T) {
	s := &Source{terms: map[string]election.Term{}, watched: map[string]bool{"f": true}}
	s.publish("f", state{exists: true, pzxid: 10, czxid: 5, leader: "/e/f/latch-0000000001"})
	s.publish("f", state{exists: true, pzxid: 12}) // leader 5 resigned
	// The watch publishes the new leader...
	s.publish("f", state{exists: true, pzxid: 13, czxid: 13, leader: "/e/f/latch-0000000002", data: "w2"})
	// ...and a Verify's read, started before it, is folded after it.
	s.publish("f", state{exists: true, pzxid: 12})

	term := s.Term("f")
	if o := tokens.Decide(13, 0, term); o == tokens.Ended || o == tokens.Stale || o == tokens.Unknown {
		t.Fatalf("leader 13 is current in ZooKeeper (nothing changed since pzxid 13), but memory holds %+v "+
			"and decides its token %v from memory (no verify): the current leader is refused until the election changes again",
			term, o)
	}
}
