package tokens

import (
	"math"

	"github.com/fencegate/fencegate/election"
)

// Outcome is the result of deciding on a token from what is known in memory.
type Outcome uint8

const (
	// Accept means the token is the current term and not below the
	// high-water mark: the write may go to the backend, whose own check is
	// final.
	Accept Outcome = iota
	// Stale means the token is below the high-water mark or below the
	// current term.
	Stale
	// Ended means the token's term is over and no later term is current.
	Ended
	// Unknown means no leader ever held the token in the election.
	Unknown
	// Verify means the token is above everything known: it may be a new
	// leader the watch has not delivered yet, or a forgery. Ask etcd.
	Verify
)

var outcomeNames = [...]string{"accept", "stale", "ended", "unknown", "verify"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "outcome(?)"
}

// MaxTerm is the highest token a term can have: etcd revisions are int64.
const MaxTerm = Token(math.MaxInt64)

// Decide decides on token t for a fence whose known high-water mark is hw and
// whose election is in term. A token above everything known is Verify: only
// DecideVerified, given etcd's answer, can tell a new leader from a forgery.
// Tokens above MaxTerm are Unknown without asking.
func Decide(t, hw Token, term election.Term) Outcome {
	switch {
	case t < hw:
		return Stale
	case t > MaxTerm:
		return Unknown
	}
	switch rev := Token(term.Rev); {
	case term.HasLeader() && t == rev:
		return Accept
	case term.HasLeader() && t < rev:
		return Stale
	case !term.HasLeader() && t <= Token(term.Last):
		// Every term up to Last is over and none is current.
		return Ended
	}
	return Verify
}

// DecideVerified decides on token t given a term read from etcd by a
// linearizable read and held, whether t was ever a leader's term in the
// election. It never returns Verify.
func DecideVerified(t, hw Token, term election.Term, held bool) Outcome {
	switch o := Decide(t, hw, term); {
	case o != Verify:
		return o
	case held && !term.HasLeader():
		return Ended
	default:
		return Unknown
	}
}
