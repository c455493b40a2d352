// Package policy decides who may do what to which fence: callers
// (principals verified by the transport), rules read from a YAML file, and
// the PostgreSQL role a rule's statements run as. Anything no rule allows
// is denied; a matching deny rule wins over any allow.
package policy
