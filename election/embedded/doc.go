// Package embedded runs a real etcd server in-process, for `fencegate dev`
// and for tests that need etcd.
//
// It guarantees that Start returns only once the server serves clients, that
// a port already in use is reported as such, and that Close returns only once
// the server has stopped and its ports are free again, so a server can be
// restarted on the same data directory and URLs.
//
// It does not provide a production etcd: the server is a single member,
// listens on plain HTTP and is meant for loopback use. Its clients speak
// gRPC: etcd's JSON gateway (/v3/...) is off, and its HTTP endpoints
// answer neither other origins (CORS) nor Host names other than loopback
// ones and the client URL's host (DNS rebinding).
package embedded
