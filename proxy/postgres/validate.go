package postgres

import (
	"errors"
	"math"
	"strconv"
	"strings"

	"github.com/fencegate/fencegate/proxy/postgres/sqlcheck"
	"github.com/fencegate/fencegate/tokens"
)

// validate checks a write before anything is sent: each statement with
// PostgreSQL's own parser (package sqlcheck). A refusal is an
// INVALID_REQUEST naming the statement's 0-based index and what in it was
// refused, where.
func (b *Backend) validate(fence string, t tokens.Token, role string, stmts []Statement) *tokens.RefusalError {
	switch {
	case fence == "":
		return tokens.Refuse(tokens.ReasonInvalidRequest, fence, t, "empty fence name")
	case t == 0 || t > math.MaxInt64:
		return tokens.Refuse(tokens.ReasonInvalidRequest, fence, t, "fencing token %d out of range 1..%d", t, int64(math.MaxInt64))
	case len(stmts) == 0:
		return tokens.Refuse(tokens.ReasonInvalidRequest, fence, t, "no statements")
	case role == "none":
		// set_config('role', 'none') is PostgreSQL's RESET ROLE.
		return tokens.Refuse(tokens.ReasonInvalidRequest, fence, t, "role %q means no role to PostgreSQL: leave the role empty to run as fencegate's login", role)
	case strings.IndexByte(role, 0) >= 0:
		return tokens.Refuse(tokens.ReasonInvalidRequest, fence, t, "role %q holds a NUL byte", role)
	}
	if b.uncheckedSQL {
		return nil
	}
	for i := range stmts {
		st, err := b.sql.Check(stmts[i].SQL)
		var msg string
		var ref *sqlcheck.Refusal
		switch {
		case errors.As(err, &ref):
			msg = ref.What + atByte(ref.Pos) + ": " + ref.Why
		case err != nil:
			msg = err.Error()
		case st.ReturnsRows && st.ModifyingCTE:
			// The result guard wraps the statement in a WITH, and
			// PostgreSQL allows data-modifying WITHs only at the top.
			msg = "returns rows from a statement with a data-modifying WITH, whose result fencegate cannot bound: drop the RETURNING, or return rows from a statement of its own"
		default:
			continue
		}
		r := tokens.Refuse(tokens.ReasonInvalidRequest, fence, t, "statement %d: %s", i, msg)
		r.Metadata = map[string]string{"statement": strconv.Itoa(i)}
		return r
	}
	return nil
}

func atByte(pos int) string {
	if pos < 0 {
		return ""
	}
	return " at byte " + strconv.Itoa(pos)
}

// elementWeight is what the result guard adds to a row's text for each
// '{', '[' and ',' of its json and array values (one or two per element):
// about what fencegate's decoded value of an element costs, over its text.
const elementWeight = "32"

// sendText returns the text fencegate prepares for a caller's statement:
// the statement itself, or, when it returns rows, the statement wrapped in
// the result guard. The guard counts the rows and their bytes inside the
// database and fails the statement, so the write rolls back, when they are
// over the limits: a result too large to return is never committed.
func (b *Backend) sendText(sql string) string {
	if isCheckSQL(sql) || b.uncheckedSQL {
		return sql
	}
	st, err := b.sql.Check(sql) // cached since validate
	if err != nil || !st.ReturnsRows {
		return sql
	}
	// The WITH is computed as its rows are read, and the guard reads at
	// most one row past the limit: a result far over it costs the server
	// no more than one just over it (a data-modifying statement still runs
	// to its end).
	over := strconv.FormatInt(b.cfg.MaxResultRows+1, 10)
	return "WITH fencegate_result AS MATERIALIZED (\n" + st.Text + "\n), fencegate_head AS (SELECT * FROM fencegate_result LIMIT " + over + ")" +
		// A subquery of its own, so the guard runs once (an init plan),
		// not once per row.
		" SELECT * FROM fencegate_result WHERE (SELECT fencegate.check_result(" +
		"(SELECT count(*) FROM fencegate_head), " +
		// The row as text: its values whole, as they will be sent, where
		// pg_column_size weighs a compressed value as stored (16 MiB of
		// repeated text weighed 192 kB). fencegate_head.*, not the bare
		// name, which a column the statement names so would be read as.
		// Each element inside a json or array value weighs elementWeight
		// more: fencegate decodes it into values of its own, about a
		// hundred bytes each where its text may be two ("{},"), and a
		// 4 MiB json of empty objects took 778 MB. Counted as the '{', '['
		// and ',' of the row as jsonb with its strings taken out (the
		// row's own '{' and the commas between its columns too), for a
		// row whose text has a '{' or '[' only: a row of scalars pays a
		// strpos. (OPERATOR() forms share one precedence: parenthesised.)
		"(SELECT pg_catalog.sum(pg_catalog.octet_length(fencegate_t.t) OPERATOR(pg_catalog.+) CASE WHEN " +
		"pg_catalog.strpos(fencegate_t.t, '{') OPERATOR(pg_catalog.>) 0 OR pg_catalog.strpos(fencegate_t.t, '[') OPERATOR(pg_catalog.>) 0 THEN " +
		elementWeight + " OPERATOR(pg_catalog.*) pg_catalog.octet_length(pg_catalog.regexp_replace(pg_catalog.regexp_replace(" +
		`pg_catalog.to_jsonb(fencegate_head.*)::pg_catalog.text, '"(?:[^"\\]|\\.)*"', '', 'g'), '[^{[,]+', '', 'g')) ELSE 0 END)::pg_catalog.int8 ` +
		"FROM fencegate_head, LATERAL (SELECT (fencegate_head.*)::pg_catalog.text AS t) AS fencegate_t), " +
		strconv.FormatInt(b.cfg.MaxResultRows, 10) + ", " + strconv.FormatInt(b.cfg.MaxResultBytes, 10) + "))"
}
