package postgres

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencegate/fencegate/migrations"
	"github.com/fencegate/fencegate/proxy/coalesce"
	"github.com/fencegate/fencegate/tokens"
)

// advanceSQL is the first statement of every fenced write. Constant, so the
// prepared statement is cached once per connection. Its parameters are
// typed: untyped, PostgreSQL would prefer an overload fencegate.advance(text,
// text) that a role with CREATE on the schema had planted.
const advanceSQL = "SELECT fencegate.advance($1::pg_catalog.text, $2::pg_catalog.int8)"

// advanceAsSQL is the first statement of a write run as a role (ExecAs):
// the fence check as fencegate's login, then the role for the rest of the
// transaction, in one statement so it costs no more round trip or message
// than advanceSQL. A target list is evaluated left to right. The role
// ends with the transaction (is_local), committed or not.
const advanceAsSQL = "SELECT fencegate.advance($1::pg_catalog.text, $2::pg_catalog.int8), pg_catalog.set_config('role', $3::pg_catalog.text, true)"

// Exec runs a fenced write: it advances the fence to token t and runs stmts,
// all in one implicit transaction ended by one Sync, so a repeated write
// costs one network round trip (statements a connection has not seen yet
// are prepared first, in one more). Either all of it commits or none of it
// does. Writes that arrive while every connection is busy share the next
// free connection's round trip, each still its own transaction
// (coalesce.go).
//
// Refusals are *tokens.RefusalError with Fence and Token set:
// INVALID_REQUEST before anything is sent; STALE_TOKEN with HighWater when t
// is below the fence's high-water mark; STATEMENT_FAILED with metadata
// "sqlstate" and "statement" (0-based index into stmts) when PostgreSQL
// refused a statement; BACKEND_UNAVAILABLE when the server could not be
// reached, timed out or was not migrated, with metadata "outcome": "unknown"
// when the write may have been committed all the same. Cancelling ctx aborts
// the write; after it was sent that is BACKEND_UNAVAILABLE with an unknown
// outcome (a batch shared with other writes goes on without it).
func (b *Backend) Exec(ctx context.Context, fence string, t tokens.Token, stmts []Statement) ([]Result, error) {
	return b.ExecAs(ctx, fence, t, "", stmts)
}

// ExecAs is Exec with stmts run as PostgreSQL role role (none when role
// is ""): right after the fence check, in the same statement, fencegate
// sets the role for the rest of the write's transaction, so the
// statements have exactly that role's privileges and the role ends with
// the transaction. fencegate's login must be a member of role (`fencegate
// grant`, CheckRoles). A role it may not become, or one that does not
// exist, refuses the write with STATEMENT_FAILED (metadata "sqlstate":
// 42501, or 22023 for a role that does not exist, and "role"), and
// nothing of it is written. Writes with different roles share batches as
// any writes do.
func (b *Backend) ExecAs(ctx context.Context, fence string, t tokens.Token, role string, stmts []Statement) ([]Result, error) {
	if r := b.validate(fence, t, role, stmts); r != nil {
		return nil, r
	}
	c := &call{fence: fence, token: t, role: role, stmts: stmts}
	if b.cfg.TermCheck != nil {
		c.term, _ = b.cfg.TermCheck(fence)
	}
	c.Init(ctx)
	return b.submit(c)
}

// resultLimitSQLState is what fencegate.check_result raises for a result
// over the limits.
const resultLimitSQLState = "FG007"

// Positions of a failure in a write, besides a caller's statement index.
const (
	atAdvance = -1 // the fence check
	atCommit  = -2 // the implicit commit at Sync, or reading its answer
)

// runBatch runs calls on one pooled connection and finishes each of them.
func (b *Backend) runBatch(calls []*call) {
	ctx, cancel := coalesce.BatchContext(calls)
	defer cancel()
	conn, err := b.acquire(ctx)
	if err != nil {
		for _, c := range calls {
			r := tokens.Refuse(tokens.ReasonBackendUnavailable, c.fence, c.token, "no connection to %s", b.host)
			r.Err = err
			c.finish(nil, r)
		}
		return
	}
	defer b.release(ctx, conn)
	if calls = coalesce.Sift(&b.recheck, calls); len(calls) == 0 {
		return
	}
	b.exec(ctx, conn.Conn(), calls)
}

// SetSendCheck has the backend ask f, as each write is about to be sent
// on its connection, whether its token may still write: one that waited
// in the queue, or for a connection, while its term ended is refused with
// f's answer, nothing sent. The gateway that owns the backend sets it.
func (b *Backend) SetSendCheck(f coalesce.SendCheck) { b.recheck.Set(f) }

// Fenced returns the write's fence and token (coalesce.Sendable).
func (c *call) Fenced() (string, tokens.Token) { return c.fence, c.token }

// Refuse finishes the call with r, nothing sent (coalesce.Sendable).
func (c *call) Refuse(r *tokens.RefusalError) { c.finish(nil, r) }

// serverSaid is the message of a refusal for the server's error pgErr at
// at: where it was reported, the server's message, its SQLSTATE and its
// detail, once each ("statement 2: division by zero (SQLSTATE 22012)").
func serverSaid(at int, pgErr *pgconn.PgError) string {
	msg := where(at) + pgErr.Message + " (SQLSTATE " + pgErr.Code + ")"
	if pgErr.Detail != "" {
		msg += ": " + pgErr.Detail
	}
	return msg
}

// where is the prefix of a refusal's message that says where at is.
func where(at int) string {
	switch {
	case at >= 0:
		return "statement " + strconv.Itoa(at) + ": "
	case at == atAdvance:
		return "the fence check: "
	case at == atCommit:
		return "commit: "
	}
	return ""
}

// refusal turns the error of write c into its refusal. at is where it was
// reported (a statement index, atAdvance or atCommit); sent says whether
// any of the write may have reached the server.
func (b *Backend) refusal(c *call, at int, err error, sent bool) *tokens.RefusalError {
	return refusalOf(b.host, c.fence, c.token, c.role, at, err, sent)
}

// RefusalOf is the refusal of a fence check that a protocol front ran in
// its client's own transaction (SELECT fencegate.advance(fence, t)) and
// that failed with err, a *pgconn.PgError from the server or a connection
// error: STALE_TOKEN with HighWater for FG001, and the same mapping as
// Exec's for everything else.
func RefusalOf(fence string, t tokens.Token, err error) *tokens.RefusalError {
	return refusalOf("the database", fence, t, "", atAdvance, err, true)
}

// refusalOf turns the error of a write into its refusal; see refusal.
func refusalOf(host, fence string, t tokens.Token, role string, at int, err error, sent bool) *tokens.RefusalError {
	r := &tokens.RefusalError{Fence: fence, Token: t, Err: err}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		clipPgError(pgErr)
		r.Metadata = map[string]string{"sqlstate": pgErr.Code}
		r.Err = pgErr
		switch {
		case at == atAdvance && isTermRefusal(pgErr):
			// fencegate.advance_term: the term check of a postgres-term
			// fence. Its message is the gateway's for the same refusal.
			r.Reason = termReasons[pgErr.Code]
			r.Term = parseTerm(pgErr.Detail)
			if r.Reason == tokens.ReasonUnknownTerm {
				r.Term = 0 // the row's term is not the current leader's
			}
			r.Metadata = nil
			r.Msg = pgErr.Message
			r.Err = nil // the message says it all; not twice
		case pgErr.Code == migrations.StaleSQLState:
			r.Reason = tokens.ReasonStaleToken
			r.HighWater = parseHighWater(pgErr.Detail)
			r.Metadata = nil
			r.Msg = "token " + t.String() + " is below the fence's high-water mark " + r.HighWater.String()
		case pgErr.Code == resultLimitSQLState:
			// The result guard (sendText): the write rolled back.
			r.Reason = tokens.ReasonInvalidRequest
			r.Msg = "statement " + strconv.Itoa(at) + ": " + pgErr.Message
		case at == atAdvance && role != "" && (pgErr.Code == "42501" || pgErr.Code == "22023"):
			// set_config('role'): permission denied, or no such role.
			// advance's own 42501 and 22023 are ruled out before it runs
			// (CheckRole, validate).
			r.Reason = tokens.ReasonStatementFailed
			r.Metadata["role"] = role
			r.Msg = "fencegate may not run statements as role " + strconv.Quote(role) + ": " + pgErr.Message +
				" (run `fencegate grant --login=<fencegate's login> --role=" + role + "`)"
		case at == atAdvance && isMissingSchema(pgErr.Code):
			r.Reason = tokens.ReasonBackendUnavailable
			r.Msg = "fencegate schema missing on " + host + " (run fencegate migrate): " + pgErr.Message
		case isUnavailable(pgErr.Code):
			// The server answered with an error: the transaction rolled
			// back, so the outcome is known.
			r.Reason = tokens.ReasonBackendUnavailable
			r.Msg = serverSaid(at, pgErr)
			r.Err = nil // said once, in the message
		default:
			r.Reason = tokens.ReasonStatementFailed
			r.Msg = serverSaid(at, pgErr)
			r.Err = nil
		}
		if at >= 0 {
			r.Metadata["statement"] = strconv.Itoa(at)
		}
		return r
	}
	var big *messageTooLargeError
	if errors.As(err, &big) {
		r.Err = nil // said in the message
		r.Msg = where(at) + big.Error()
		switch {
		case big.rolledBack():
			r.Reason = tokens.ReasonStatementFailed
			r.Msg += "; the write was rolled back"
			if at >= 0 {
				r.Metadata = map[string]string{"statement": strconv.Itoa(at)}
			}
		case sent:
			r.Reason = tokens.ReasonBackendUnavailable
			r.Msg += ", and the write may yet be applied"
			r.Metadata = map[string]string{"outcome": "unknown"}
		default:
			r.Reason = tokens.ReasonBackendUnavailable
		}
		return r
	}
	var enc *encodeError
	if errors.As(err, &enc) {
		// An argument pgx could not encode for the statement's parameter.
		r.Reason = tokens.ReasonInvalidRequest
		r.Msg = "statement " + strconv.Itoa(at) + ": " + enc.err.Error()
		r.Metadata = map[string]string{"statement": strconv.Itoa(at)}
		if at < 0 {
			r.Metadata = nil
		}
		return r
	}
	r.Reason = tokens.ReasonBackendUnavailable
	var dec *decodeError
	var txs *txStateError
	switch {
	case errors.As(err, &txs):
		r.Msg = txs.Error() + "; connection closed, outcome unknown"
		r.Metadata = map[string]string{"outcome": "unknown"}
	case !sent:
		r.Msg = "cannot reach " + host
	case errors.As(err, &dec):
		r.Msg = "cannot read the answer to statement " + strconv.Itoa(at) + " from " + host + ": " + dec.Error()
		r.Metadata = map[string]string{"outcome": "unknown"}
	default:
		r.Msg = "lost " + host + " during the write"
		r.Metadata = map[string]string{"outcome": "unknown"}
	}
	if pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded) {
		r.Msg += ": timed out"
	}
	return r
}

// maxErrorText bounds each text field of a server error that fencegate
// passes on and logs. PostgreSQL quotes the offending value in some errors
// (invalid input syntax for type integer: "..."), so a statement could
// otherwise make its refusal, and the log line, as large as it likes.
const maxErrorText = 1 << 10

// clipPgError cuts pgErr's text fields to maxErrorText bytes, at a rune
// boundary. The pipeline owns pgErr: nothing else holds it.
func clipPgError(pgErr *pgconn.PgError) {
	for _, f := range []*string{&pgErr.Message, &pgErr.Detail, &pgErr.Hint, &pgErr.Where, &pgErr.InternalQuery} {
		if len(*f) <= maxErrorText {
			continue
		}
		cut := maxErrorText
		for cut > 0 && !utf8.RuneStart((*f)[cut]) {
			cut--
		}
		*f = (*f)[:cut] + "… (" + strconv.Itoa(len(*f)-cut) + " more bytes)"
	}
}

// parseHighWater reads fencegate.advance's DETAIL "high_water=<n>".
func parseHighWater(detail string) tokens.Token {
	v, ok := strings.CutPrefix(detail, "high_water=")
	if !ok {
		return 0
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0
	}
	return tokens.Token(n)
}

// termReasons are the refusals of fencegate.advance_term's term check.
// A lock key another election shares (FG008) is TERM_ENDED: the token is
// its election's latest term, but no lock shows a leader of it holding
// that term, which is what TERM_ENDED tells a writer (step down, nothing
// written); its message names the other election and the fix.
var termReasons = map[string]tokens.Reason{
	migrations.StaleSQLState:         tokens.ReasonStaleToken,
	migrations.TermEndedSQLState:     tokens.ReasonTermEnded,
	migrations.UnknownTermSQLState:   tokens.ReasonUnknownTerm,
	migrations.LockKeySharedSQLState: tokens.ReasonTermEnded,
}

// isTermRefusal: err is advance_term's term check refusing (its DETAIL is
// "term=<n>"; advance's own FG001 says "high_water=<n>").
func isTermRefusal(pgErr *pgconn.PgError) bool {
	_, ok := termReasons[pgErr.Code]
	return ok && strings.HasPrefix(pgErr.Detail, "term=")
}

// parseTerm reads advance_term's DETAIL "term=<n>".
func parseTerm(detail string) tokens.Token {
	v, ok := strings.CutPrefix(detail, "term=")
	if !ok {
		return 0
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0
	}
	return tokens.Token(n)
}

// isMissingSchema: fencegate.advance or its schema does not exist.
func isMissingSchema(code string) bool {
	return code == "42883" || code == "3F000" || code == "42P01"
}

// isUnavailable: SQLSTATEs that say the server, not the statement, failed.
func isUnavailable(code string) bool {
	switch {
	case strings.HasPrefix(code, "08"), // connection exception
		strings.HasPrefix(code, "53"), // insufficient resources
		strings.HasPrefix(code, "57"), // operator intervention: statement timeout, shutdown
		strings.HasPrefix(code, "58"): // system error
		return true
	}
	return false
}
