package postgres

import (
	"fmt"
	"strings"
)

// TermCheck is the fence check of a fence whose term source is
// postgres-term: fencegate.advance_term (migration 005), which accepts a
// token only when it is the current term of the fence's row in Table and
// some session holds the fence's advisory lock, and (migration 011) no
// other row of Table derives the same lock key, then advances the fence as
// fencegate.advance does. Build one with NewTermCheck.
type TermCheck struct {
	// Table is the term table, schema-qualified and quoted as needed
	// (the function resolves it with its own pinned search_path).
	Table string
	// LockKey is how the advisory lock key derives from the fence name:
	// "hashtext" (hashtext(name), an int4 widened) or "hashtextextended"
	// (hashtextextended(name, 0)).
	LockKey string

	sql, asSQL string // the check, alone and with the role
}

// The lock key derivations advance_term knows.
const (
	LockKeyHashtext         = "hashtext"
	LockKeyHashtextExtended = "hashtextextended"
)

// termCheckPrefix starts every statement of a TermCheck.
const termCheckPrefix = "SELECT fencegate.advance_term("

// NewTermCheck returns the check of fences whose terms are the rows of
// table (schema-qualified) and whose advisory lock keys derive by lockKey.
func NewTermCheck(table, lockKey string) (TermCheck, error) {
	switch {
	case table == "" || strings.IndexByte(table, 0) >= 0:
		return TermCheck{}, fmt.Errorf("postgres: invalid term table %q", table)
	case lockKey != LockKeyHashtext && lockKey != LockKeyHashtextExtended:
		return TermCheck{}, fmt.Errorf("postgres: lock key derivation %q: want %s or %s", lockKey, LockKeyHashtext, LockKeyHashtextExtended)
	}
	// Literals, not parameters: the check keeps advance's parameters, so
	// every way in binds it alike, and it is prepared once per connection.
	args := ", " + quoteLiteral(table) + ", " + quoteLiteral(lockKey) + ")"
	return TermCheck{
		Table:   table,
		LockKey: lockKey,
		sql:     termCheckPrefix + typedParams + args,
		asSQL:   termCheckPrefix + typedParams + args + ", pg_catalog.set_config('role', $3::pg_catalog.text, true)",
	}, nil
}

// typedParams are the check's parameters, typed so that no overload a role
// with CREATE on the schema planted is preferred (advanceSQL).
const typedParams = "$1::pg_catalog.text, $2::pg_catalog.int8"

// quoteLiteral is s as a standard-conforming SQL string literal.
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// isCheckSQL: sql is one of fencegate's fence checks, not a caller's
// statement (which may not name schema fencegate: sqlcheck).
func isCheckSQL(sql string) bool {
	return sql == advanceSQL || sql == advanceAsSQL || strings.HasPrefix(sql, termCheckPrefix)
}
