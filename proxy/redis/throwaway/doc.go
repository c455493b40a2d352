// Package throwaway runs a disposable Redis server for tests and for
// `fencegate dev`.
//
// Start runs redis-server as a child process, listening on 127.0.0.1 only
// (protected mode on, no unix socket), and waits until it answers PING.
// Persistence is off (no RDB snapshots, no AOF): a Restart or Kill loses the
// data and the script cache, which is what tests of a Redis restart want.
// Close stops the server and removes its temporary directory, leaving no
// process, port or file behind.
//
// redis-server is looked up on PATH and then in /usr/bin and /usr/sbin.
//
// What it does not do: it is not a production server. There is no
// authentication, no persistence and no memory limit. If the calling process
// is killed with SIGKILL the server receives SIGTERM through the parent-death
// signal on Linux, but its temporary directory stays behind.
package throwaway
