// Package auth puts TLS on fencegate's listeners and says who each caller
// is (API.md, "Authentication and authorization").
//
// ServerTLS serves the certificate, key and CA bundle as they are on disk
// (--cert-file, --key-file, --trusted-ca-file, --tls-min-version). The
// files are stat'ed at most once a second, on a handshake, and loaded again
// when their mtime, size or inode changed, or on Reload (SIGHUP). New
// handshakes get the new material; open connections keep their handshake,
// but not a CA taken out of the bundle: once a reload has removed every CA
// a connection's verified chains end in, its certificate names no one, as
// if it had expired (ChainsInvalid). A changed file that does not load
// leaves the previous material in use and logs one line. With a CA
// bundle, a client certificate it verifies is required; a resumed
// session's chain is checked against the bundle loaded at that moment
// (crypto/tls does it).
//
// Authenticator names the caller of each request (policy.Caller) from what
// the transport verified and nothing else: a client certificate in the
// handshake's VerifiedChains (PrincipalOf), else an Authorization "Bearer"
// secret listed in the token file (--token-auth-file, "token:<name>"). No
// other header or metadata is read. The token file holds only SHA-256
// hashes of the secrets; a presented secret is hashed and compared with
// every entry in constant time. A certificate names the caller only while
// its verified chain is valid at the request's time (time.Now, as a new
// handshake decides it) and ends in a CA of the bundle as last reloaded
// (ChainsInvalid, which the drop-in listeners call too): a connection kept
// open outlives the handshake's check. The trust anchors are the
// process's: a CA counts while any ServerTLS holds it (serve has one), and
// a chain verified by a tls.Config of another making is judged by its
// dates only. The same Identify serves the gRPC interceptors and the HTTP
// middleware, which also removes the secret from the request before
// grpc-gateway could forward it as metadata.
//
// The package refuses no request: the write pipeline refuses an anonymous
// caller when Authenticator.Required, so that refusals are counted like the
// others. It does not authorize (package policy does) and does not
// configure TLS toward PostgreSQL, Redis or etcd.
package auth
