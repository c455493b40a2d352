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
// Options.TLS makes it serve TLS only (Debian's redis-server is built with
// TLS), optionally requiring client certificates; Options.Users adds ACL
// users. Without a TLS listener the readiness check is the ready log line
// and a TCP connection, as the harness holds no client certificate.
//
// redis-server is looked up on PATH and then in /usr/bin and /usr/sbin.
//
// What it does not do: it is not a production server. Without Users the
// default user needs no password; there is no persistence and no memory limit. If the calling process
// is killed with SIGKILL the server receives SIGTERM through the parent-death
// signal on Linux, but its temporary directory stays behind.
package throwaway
