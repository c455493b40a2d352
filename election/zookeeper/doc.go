// Package zookeeper is the term source of fences whose leaders are elected
// in ZooKeeper (--term-sources PATTERN=zookeeper).
//
// The election of fence F is the znode <root>/F. Its candidates are the
// children whose names end in the ten-digit sequence number ZooKeeper
// appends to sequential nodes: Curator LeaderLatch's
// "_c_<uuid>-latch-0000000007", kazoo Election's and Lock's
// "<uuid>__lock__0000000007", a plain "latch-0000000007". Other children
// are ignored. The leader is the candidate with the lowest sequence number,
// and its term (the fencing token) is the leader node's czxid, the
// transaction id that created it: terms of one election strictly increase,
// and a term ends when its node is deleted (resign, session expiry).
//
// A leader's node whose ACL denies fencegate READ (Curator's
// ACLProvider, CREATOR_ALL_ACL) still has its term read, from its stat
// (ZooKeeper checks no ACL for exists); its label (the node's data) is
// then unknown, and the term reports no Leader value.
//
// Source guarantees: Term reads memory only and does not allocate; the
// first Verify of an election starts a child watch on it, and each change
// of its children is read again and published, never older over newer
// (reads are numbered in the order they are sent, and each new connection
// is synced first); Verify syncs the server it asks with the ZooKeeper
// leader before reading, so its answer includes every committed change;
// memory counts as fresh (election.Freshness) only while Run's heartbeat,
// a stat of the root every second, was answered within 3 s, so a link gone
// silent is noticed in about 3 s, not at go-zookeeper's read deadline (two
// thirds of the session timeout), and only after the election's watch
// read it successfully in the current connection: while its reads fail
// (an election node fencegate may not read, a lost connection) it is not
// fresh, and its writes are read first, or refused while they cannot be.
//
// A read sent after another that shows the election node's pzxid below
// the one seen before can only come from a ZooKeeper whose history went
// back (restored from a backup or snapshot, rebuilt, replaced behind the
// same address). As the etcd watcher does for a restored etcd, the source
// then raises a floor to the highest zxid it read before the connection
// the rewind was seen in, logged once each time the floor rises: every
// term up to it is no leader's, whoever holds it (TERM_ENDED; leaders
// campaign past it), as such a ZooKeeper may hand those zxids out again;
// and memory follows the new history from then on. The floor lasts
// until fencegate restarts.
//
// What it does not do: tell a term that ended before it was ever seen from
// a forged one (both refused, the first as UNKNOWN_TERM rather than
// TERM_ENDED), follow elections past Config.MaxElections (those are
// read again on each write above memory instead), or notice a rewind that
// no watched election shows going back (every election's pzxid in the
// new history at or above the one seen before, or fencegate restarted in
// between).
package zookeeper
