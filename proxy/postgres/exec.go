package postgres

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencegate/fencegate/migrations"
	"github.com/fencegate/fencegate/tokens"
)

// advanceSQL is the first statement of every fenced write. Constant, so the
// prepared statement is cached once per connection.
const advanceSQL = "SELECT fencegate.advance($1, $2)"

// Exec runs a fenced write: it advances the fence to token t and runs stmts,
// all in one implicit transaction sent as one pipelined batch, so a repeated
// write costs one network round trip (statements a connection has not seen
// yet are prepared first, in one more). Either all of it commits or none of
// it does.
//
// Refusals are *tokens.RefusalError with Fence and Token set:
// INVALID_REQUEST before anything is sent; STALE_TOKEN with HighWater when t
// is below the fence's high-water mark; STATEMENT_FAILED with metadata
// "sqlstate" and "statement" (0-based index into stmts) when PostgreSQL
// refused a statement; BACKEND_UNAVAILABLE when the server could not be
// reached, timed out or was not migrated, with metadata "outcome": "unknown"
// when the write may have been committed all the same. Cancelling ctx aborts
// the write; after the batch was sent that is BACKEND_UNAVAILABLE with an
// unknown outcome.
func (b *Backend) Exec(ctx context.Context, fence string, t tokens.Token, stmts []Statement) ([]Result, error) {
	if r := validate(fence, t, stmts); r != nil {
		return nil, r
	}
	batch := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(stmts)+1)}
	batch.Queue(advanceSQL, fence, int64(t))
	for _, s := range stmts {
		args := make([]any, len(s.Params))
		for i, p := range s.Params {
			args[i] = param(p)
		}
		batch.Queue(s.SQL, args...)
	}

	conn, err := b.acquire(ctx)
	if err != nil {
		r := tokens.Refuse(tokens.ReasonBackendUnavailable, fence, t, "no connection to %s", b.host)
		r.Err = err
		return nil, r
	}
	defer b.release(ctx, conn)

	results, failedAt, err := run(ctx, conn.Conn(), batch, len(stmts))
	if err != nil {
		return nil, b.refusal(fence, t, stmts, failedAt, err)
	}
	return results, nil
}

// Positions of a failure in the batch, besides a caller's statement index.
const (
	atAdvance = -1 // the fence check
	atCommit  = -2 // the implicit commit at Sync, or reading its answer
)

// run sends the batch and reads its results. On error it also returns where
// the error was reported (a caller's statement index, atAdvance or
// atCommit).
func run(ctx context.Context, conn *pgx.Conn, batch *pgx.Batch, n int) ([]Result, int, error) {
	br := conn.SendBatch(ctx, batch)
	var hw int64
	if err := br.QueryRow().Scan(&hw); err != nil {
		_ = br.Close()
		return nil, atAdvance, err
	}
	results := make([]Result, n)
	for i := range results {
		if err := readResult(br, &results[i]); err != nil {
			_ = br.Close()
			return nil, i, err
		}
	}
	// The implicit transaction commits at the batch's Sync; a deferred
	// constraint or a serialisation failure surfaces here.
	if err := br.Close(); err != nil {
		return nil, atCommit, err
	}
	return results, 0, nil
}

func readResult(br pgx.BatchResults, res *Result) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	fds := rows.FieldDescriptions()
	if len(fds) > 0 {
		res.Columns = make([]string, len(fds))
		for i, fd := range fds {
			res.Columns[i] = fd.Name
		}
		res.Rows = [][]any{}
	}
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return err
		}
		for i, v := range vals {
			vals[i] = jsonValue(v, fds[i].DataTypeOID)
		}
		res.Rows = append(res.Rows, vals)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	res.RowsAffected = rows.CommandTag().RowsAffected()
	return nil
}

// refusal turns an error of a write into its refusal.
func (b *Backend) refusal(fence string, t tokens.Token, stmts []Statement, at int, err error) *tokens.RefusalError {
	r := &tokens.RefusalError{Fence: fence, Token: t, Err: err}
	var pre pgx.ErrPreprocessingBatch
	if errors.As(err, &pre) {
		// Failed while preparing or encoding: nothing was executed.
		at = statementIndex(stmts, pre.SQL())
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		r.Metadata = map[string]string{"sqlstate": pgErr.Code}
		r.Err = pgErr
		switch {
		case pgErr.Code == migrations.StaleSQLState:
			r.Reason = tokens.ReasonStaleToken
			r.HighWater = parseHighWater(pgErr.Detail)
			r.Metadata = nil
			r.Msg = "token " + t.String() + " is below the fence's high-water mark " + r.HighWater.String()
		case at == atAdvance && isMissingSchema(pgErr.Code):
			r.Reason = tokens.ReasonBackendUnavailable
			r.Msg = "fencegate schema missing on " + b.host + " (run fencegate migrate): " + pgErr.Message
		case isUnavailable(pgErr.Code):
			// The server answered with an error: the transaction rolled
			// back, so the outcome is known.
			r.Reason = tokens.ReasonBackendUnavailable
			r.Msg = pgErr.Message
		default:
			r.Reason = tokens.ReasonStatementFailed
			r.Msg = pgErr.Message
			if pgErr.Detail != "" {
				r.Msg += " (" + pgErr.Detail + ")"
			}
		}
		if at >= 0 {
			r.Metadata["statement"] = strconv.Itoa(at)
		}
		return r
	}
	if errors.As(err, &pre) && !isConnError(err) {
		// An argument pgx could not encode for the statement's parameter.
		r.Reason = tokens.ReasonInvalidRequest
		r.Msg = "statement " + strconv.Itoa(at) + ": " + errors.Unwrap(pre).Error()
		r.Metadata = map[string]string{"statement": strconv.Itoa(at)}
		if at < 0 {
			r.Metadata = nil
		}
		return r
	}
	r.Reason = tokens.ReasonBackendUnavailable
	r.Msg = "lost " + b.host + " during the write"
	if errors.As(err, &pre) || pgconn.SafeToRetry(err) {
		r.Msg = "cannot reach " + b.host
	} else {
		r.Metadata = map[string]string{"outcome": "unknown"}
	}
	if pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded) {
		r.Msg += ": timed out"
	}
	return r
}

// statementIndex finds sql among stmts, or atAdvance.
func statementIndex(stmts []Statement, sql string) int {
	for i, s := range stmts {
		if s.SQL == sql {
			return i
		}
	}
	return atAdvance
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

// isConnError reports whether err is a connection failure rather than an
// encoding one.
func isConnError(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce) || pgconn.Timeout(err) || errors.Is(err, context.Canceled) ||
		errors.Is(err, context.DeadlineExceeded) || pgconn.SafeToRetry(err) || isNetError(err)
}

func isNetError(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
