// Package throwaway runs a disposable PostgreSQL server for tests and for
// `fencegate dev`.
//
// Start initialises a fresh cluster with initdb (trust authentication, loopback
// only), starts the postgres server as a child process and waits until it
// accepts connections. The server listens on 127.0.0.1 and on a unix socket in
// its data directory, never on other interfaces. Close stops it with a fast
// shutdown and removes the temporary directory, leaving no process, port or
// file behind.
//
// Options.TLS turns ssl on with a given certificate and key, copied into the
// data directory for the server's user, as PostgreSQL requires.
//
// The server binaries (initdb, postgres) are looked up on PATH and then in
// /usr/lib/postgresql/*/bin, highest version first. PostgreSQL refuses to run
// as root, so when the calling process is root the server runs as the
// "postgres" user.
//
// What it does not do: it is not a production server. Durability is off by
// default (fsync, synchronous_commit and full_page_writes), authentication is
// trust, and the data is deleted on Close. If the calling process is killed
// with SIGKILL the server receives SIGQUIT through the parent-death signal on
// Linux, but its temporary directory stays behind.
package throwaway
