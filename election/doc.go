// Package election holds fencegate's view of etcd elections: Campaign, for
// workers written in Go to become leader and learn their fencing token, and
// Watcher, which fencegate uses to know every election's current term.
//
// An election <name> lives under "<prefix>/<name>/" (default prefix
// DefaultPrefix) with the layout and rules of etcd's concurrency.Election
// and `etcdctl elect`: each candidate is a key attached to its lease, the
// leader is the key with the lowest create revision, and that revision is
// the term, the fencing token. Candidates using any etcd client take part in
// the same election.
//
// What it guarantees:
//   - Leadership.Token is the create revision of the leader's key, the same
//     number every observer of the election computes.
//   - Leadership.Done closes when Resign is called, when etcd says the lease
//     or key is gone, and, without a word from etcd, SafetyMargin before the
//     lease could have expired since the last keep-alive it answered.
//   - Watcher reports every leader it sees and every term end (a leader's
//     key deleted), never moves an election's state back to an older
//     revision, and re-lists after a compacted or broken watch; Synced tells
//     whether its state is following etcd.
//   - Watcher.Verify answers from a linearizable read.
//
// What it does not guarantee:
//   - Done is a best-effort signal. A process paused (GC, SIGSTOP) or a
//     clock running slow can keep acting after its lease expired. Safety
//     comes from fencing in storage: send Token with every write to a store
//     that refuses tokens below the highest it accepted.
//   - Watcher's memory lags etcd by the watch's delivery time; use Verify
//     for a token above what memory knows.
//   - An ended term is recognised by Verify only while etcd's history still
//     holds the revision it started at (not compacted), and a key that was a
//     candidate but never leader cannot be told apart from an ended term.
package election
