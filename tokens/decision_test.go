package tokens_test

import (
	"testing"

	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/tokens"
)

// leader is a term whose current leader holds rev, the highest term seen.
func leader(rev int64) election.Term { return election.Term{Election: "jobs", Rev: rev, Last: rev} }

// noLeader is a term with no current leader after terms up to last.
func noLeader(last int64) election.Term { return election.Term{Election: "jobs", Last: last} }

type decideCase struct {
	name string
	t    tokens.Token
	hw   tokens.Token
	term election.Term
	want tokens.Outcome
}

var decideCases = []decideCase{
	// High-water mark first: it dominates whatever the term says.
	{name: "below high-water, current term", t: 7, hw: 8, term: leader(7), want: tokens.Stale},
	{name: "below high-water, no leader", t: 7, hw: 8, term: noLeader(9), want: tokens.Stale},
	{name: "below high-water, above everything", t: 7, hw: 8, term: election.Term{}, want: tokens.Stale},
	{name: "at high-water, current term", t: 7, hw: 7, term: leader(7), want: tokens.Accept},

	{name: "current term, nothing accepted", t: 7, hw: 0, term: leader(7), want: tokens.Accept},
	{name: "current term above high-water", t: 7, hw: 3, term: leader(7), want: tokens.Accept},
	{name: "term 1", t: 1, hw: 0, term: leader(1), want: tokens.Accept},

	{name: "below current term", t: 6, hw: 0, term: leader(7), want: tokens.Stale},
	{name: "far below current term", t: 1, hw: 0, term: leader(1000), want: tokens.Stale},

	{name: "no leader, last term", t: 7, hw: 0, term: noLeader(7), want: tokens.Ended},
	{name: "no leader, below last term", t: 5, hw: 0, term: noLeader(7), want: tokens.Ended},
	{name: "no leader, at high-water and last term", t: 7, hw: 7, term: noLeader(7), want: tokens.Ended},

	{name: "above current term", t: 8, hw: 0, term: leader(7), want: tokens.Verify},
	{name: "no leader, above last term", t: 8, hw: 0, term: noLeader(7), want: tokens.Verify},
	{name: "election never seen", t: 1, hw: 0, term: election.Term{}, want: tokens.Verify},
	{name: "token 0, election never seen", t: 0, hw: 0, term: election.Term{}, want: tokens.Ended},
	{name: "above high-water, election never seen", t: 9, hw: 8, term: election.Term{}, want: tokens.Verify},
	// Ended is only for an election without a leader: with a leader, a token
	// above its term goes to etcd even if a higher term was seen.
	// No etcd revision is above MaxInt64: a forgery, without asking etcd.
	{name: "above max term", t: tokens.MaxTerm + 1, hw: 0, term: leader(7), want: tokens.Unknown},
	{name: "max term", t: tokens.MaxTerm, hw: 0, term: leader(7), want: tokens.Verify},
	{name: "leader, between term and last", t: 8, hw: 0, term: election.Term{Rev: 7, Last: 9}, want: tokens.Verify},
}

func TestDecide(t *testing.T) {
	for _, tc := range decideCases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tokens.Decide(tc.t, tc.hw, tc.term); got != tc.want {
				t.Errorf("Decide(%d, %d, rev=%d last=%d): got %v, want %v",
					tc.t, tc.hw, tc.term.Rev, tc.term.Last, got, tc.want)
			}
		})
	}
}

// TestDecideProperties checks over a small grid what must hold whatever the
// table misses: Accept only for the current term at or above high-water,
// Stale exactly when below high-water or below the current term, and never
// Unknown from memory alone.
func TestDecideProperties(t *testing.T) {
	const n = 5
	// Token 0 never comes out of Parse, but must not be accepted either.
	for tok := tokens.Token(0); tok <= n; tok++ {
		for hw := tokens.Token(0); hw <= n; hw++ {
			for last := int64(0); last <= n; last++ {
				for _, rev := range []int64{0, last} {
					term := election.Term{Rev: rev, Last: last}
					got := tokens.Decide(tok, hw, term)

					if got == tokens.Unknown {
						t.Errorf("Decide(%d, %d, rev=%d last=%d): got Unknown, want anything else", tok, hw, rev, last)
					}
					wantAccept := rev != 0 && tok == tokens.Token(rev) && tok >= hw
					if (got == tokens.Accept) != wantAccept {
						t.Errorf("Decide(%d, %d, rev=%d last=%d): got %v, want accept=%v", tok, hw, rev, last, got, wantAccept)
					}
					wantStale := tok < hw || (rev != 0 && tok < tokens.Token(rev))
					if (got == tokens.Stale) != wantStale {
						t.Errorf("Decide(%d, %d, rev=%d last=%d): got %v, want stale=%v", tok, hw, rev, last, got, wantStale)
					}
					wantVerify := tok >= hw && tok > tokens.Token(last)
					if (got == tokens.Verify) != wantVerify {
						t.Errorf("Decide(%d, %d, rev=%d last=%d): got %v, want verify=%v", tok, hw, rev, last, got, wantVerify)
					}
				}
			}
		}
	}
}

func TestDecideVerified(t *testing.T) {
	tests := []struct {
		name string
		t    tokens.Token
		hw   tokens.Token
		term election.Term // as read from etcd
		held bool
		want tokens.Outcome
	}{
		// What Decide settles from memory stands, whatever etcd says of t.
		{name: "below high-water", t: 7, hw: 8, term: leader(7), held: true, want: tokens.Stale},
		{name: "below high-water, not held", t: 7, hw: 8, term: election.Term{}, held: false, want: tokens.Stale},
		{name: "current term", t: 9, hw: 0, term: leader(9), held: true, want: tokens.Accept},
		{name: "below current term", t: 8, hw: 0, term: leader(9), held: true, want: tokens.Stale},
		{name: "below current term, not held", t: 8, hw: 0, term: leader(9), held: false, want: tokens.Stale},
		{name: "no leader, last term", t: 9, hw: 0, term: noLeader(9), held: true, want: tokens.Ended},
		// Current behaviour: at or below the last term of an election
		// without a leader is Ended even when etcd says t was never held.
		{name: "no leader, below last term, not held", t: 8, hw: 0, term: noLeader(9), held: false, want: tokens.Ended},

		// Above everything etcd knows as current: held decides.
		{name: "held, no leader", t: 9, hw: 0, term: noLeader(7), held: true, want: tokens.Ended},
		{name: "held, election without history", t: 9, hw: 0, term: election.Term{}, held: true, want: tokens.Ended},
		{name: "held, above current leader", t: 9, hw: 0, term: leader(7), held: true, want: tokens.Unknown},
		{name: "not held, above current leader", t: 9, hw: 0, term: leader(7), held: false, want: tokens.Unknown},
		{name: "not held, no leader", t: 9, hw: 0, term: noLeader(7), held: false, want: tokens.Unknown},
		{name: "not held, election never seen", t: 1, hw: 0, term: election.Term{}, held: false, want: tokens.Unknown},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tokens.DecideVerified(tc.t, tc.hw, tc.term, tc.held)
			if got != tc.want {
				t.Errorf("DecideVerified(%d, %d, rev=%d last=%d, held=%v): got %v, want %v",
					tc.t, tc.hw, tc.term.Rev, tc.term.Last, tc.held, got, tc.want)
			}
		})
	}
}

// DecideVerified never asks to verify again, and agrees with Decide on
// everything Decide settles.
func TestDecideVerifiedProperties(t *testing.T) {
	const n = 4
	for tok := tokens.Token(1); tok <= n; tok++ {
		for hw := tokens.Token(0); hw <= n; hw++ {
			for last := int64(0); last <= n; last++ {
				for _, rev := range []int64{0, last} {
					for _, held := range []bool{false, true} {
						term := election.Term{Rev: rev, Last: last}
						got := tokens.DecideVerified(tok, hw, term, held)
						if got == tokens.Verify {
							t.Errorf("DecideVerified(%d, %d, rev=%d last=%d, held=%v): got Verify", tok, hw, rev, last, held)
						}
						if d := tokens.Decide(tok, hw, term); d != tokens.Verify && got != d {
							t.Errorf("DecideVerified(%d, %d, rev=%d last=%d, held=%v): got %v, want Decide's %v", tok, hw, rev, last, held, got, d)
						}
					}
				}
			}
		}
	}
}

func TestOutcomeString(t *testing.T) {
	tests := []struct {
		o    tokens.Outcome
		want string
	}{
		{tokens.Accept, "accept"},
		{tokens.Stale, "stale"},
		{tokens.Ended, "ended"},
		{tokens.Unknown, "unknown"},
		{tokens.Verify, "verify"},
		{tokens.Verify + 1, "outcome(?)"},
		{255, "outcome(?)"},
	}
	for _, tc := range tests {
		if got := tc.o.String(); got != tc.want {
			t.Errorf("Outcome(%d).String(): got %q, want %q", uint8(tc.o), got, tc.want)
		}
	}
}
