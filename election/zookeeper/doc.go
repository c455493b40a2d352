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
// Source guarantees: Term reads memory only and does not allocate; the
// first Verify of an election starts a child watch on it, and each change
// of its children is read again and published, never older over newer
// (reads are numbered in the order they are sent, and each new connection
// is synced first); Verify syncs the server it asks with the ZooKeeper
// leader before reading, so its answer includes every committed change;
// memory counts as fresh (election.Freshness) only while Run's heartbeat,
// a stat of the root every second, was answered within 3 s, so a link gone
// silent is noticed in about 3 s, not at go-zookeeper's read deadline (two
// thirds of the session timeout).
// What it does not do: tell a term that ended before it was ever seen from
// a forged one (both refused, the first as UNKNOWN_TERM rather than
// TERM_ENDED), or follow elections past Config.MaxElections (those are
// read again on each write above memory instead).
package zookeeper
