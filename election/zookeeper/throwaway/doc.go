// Package throwaway runs a real, standalone ZooKeeper server for tests and
// chaos runs: Debian's zookeeper package (org.apache.zookeeper's
// ZooKeeperServerMain under the system's java), on a free loopback port,
// with a generated zoo.cfg and a temporary data directory.
//
// It guarantees that Start returns only once the server serves sessions
// (the srvr four-letter command reports its mode), and that Close stops the process and removes what
// Start created. It does not make a quorum: one server, no persistence
// across Close.
package throwaway
