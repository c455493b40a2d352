package election

import "strings"

// Term is what is known of one election's leadership at a point in etcd's
// history.
type Term struct {
	// Election is the election's name (the path segment under the prefix).
	Election string
	// Rev is the current leader's term: the create revision of its key.
	// Zero when the election has no leader.
	Rev int64
	// Leader is the value the current leader campaigned with; Key is its
	// etcd key. Both empty when there is no leader.
	Leader string
	Key    string
	// Last is the highest term this observer has seen in the election,
	// current or ended. Last >= Rev.
	Last int64
	// Changes counts the leadership changes observed (a new leader or a
	// leader going away).
	Changes uint64
	// ObservedRev is the etcd revision at which this state was observed.
	ObservedRev int64
}

// CompareTerms orders terms by election name, for slices.SortFunc: the
// order in which every source lists its terms.
func CompareTerms(a, b Term) int { return strings.Compare(a.Election, b.Election) }

// HasLeader reports whether the election had a leader when observed.
func (t Term) HasLeader() bool { return t.Rev != 0 }
