package tokens

import (
	"context"

	"github.com/fencegate/fencegate/election"
)

// TermSource tells the gateway the terms of elections. *election.Watcher
// implements it.
type TermSource interface {
	// Term returns the latest term known in memory for the election; the
	// zero Term (no leader, nothing seen) for an election never seen.
	Term(name string) election.Term
	// Verify reads the election from etcd with a linearizable read, so the
	// answer reflects every term etcd has committed, and reports whether
	// token was ever a leader's term in it. It returns an error when etcd
	// cannot answer.
	Verify(ctx context.Context, name string, token int64) (t election.Term, held bool, err error)
}
