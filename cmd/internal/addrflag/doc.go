// Package addrflag checks the form of the address flags of fencegate's
// commands (listen addresses, host:port, etcd endpoints and client URLs)
// before anything listens or dials, so that a malformed value is one line
// naming the flag and the value, not the error of net or net/url after a
// dial timeout.
//
// It checks the form only: whether the host resolves, the port is free or
// anything answers there is for the listen or dial to find.
package addrflag
