// Package tokens holds fencegate's fencing-token model: the Token type and its
// parsing, the source of election terms the gateway consults, the per-fence
// in-memory high-water tracker, and the decision that turns a token, a
// high-water mark and a term into accept or a refusal reason.
//
// Everything here is a fast path and a vocabulary. The decision made from
// memory only ever refuses early or lets a write go on to the backend; the
// backend's own check, atomic with the write, is what makes a write safe.
// Nothing in this package talks to etcd or a database.
//
// Parse accepts exactly the canonical decimal spelling of a uint64 in
// [1, 2^64): digits only, no sign, space, prefix or leading zero.
//
// A Tracker holds one backend's marks. What a backend reports is not
// trusted blindly: RaiseWithin leaves out a mark above Ceiling, the highest
// term the term source has shown, so a mark tampered with in one backend can
// neither refuse that backend's real leader from memory nor, with one
// Tracker per backend, touch another backend's writes.
package tokens
