// Package policy decides who may do what to which fence: callers
// (principals verified by the transport), rules read from a YAML file, and
// the PostgreSQL role a rule's statements run as. Anything no rule allows
// is denied; a matching deny rule wins over any allow.
//
// Guarantees: a Policy is immutable and validated as a whole, so a rule is
// never half read; Decide does not allocate; a Store swaps whole policies
// atomically and keeps the policy in force when a new file cannot be read,
// is invalid, or the caller's Check fails it. A file that failed for a
// reason that may pass (it could not be read, Check could not decide) is
// tried again at every poll until it loads; an invalid or refused one only
// once it changes.
//
// Not guaranteed: that a postgres_role exists or that fencegate may SET ROLE
// to it. That is the database's to say, checked by the caller (Check) and at
// each write.
package policy
