// Package postgres is fencegate's PostgreSQL backend: it runs fenced writes
// against a database migrated with package migrations.
//
// A fenced write (Backend.Exec) is sent as one pipelined batch on one
// connection: SELECT fencegate.advance(fence, token), then the caller's
// parameterised statements, then a single Sync. PostgreSQL runs everything
// before a Sync as one implicit transaction, so the write is all or nothing:
// a stale token (SQLSTATE FG001) or any failing statement rolls back every
// statement and the fence raise. advance leaves the fence row locked until
// commit: shared by the writes of the current term, which run side by side,
// and exclusively by a write that raises the mark, which waits for all of
// them. So a write with a lower token can never commit after one with a
// higher token, across any number of fencegate replicas, and no lock is
// taken on anything but the fence's own row.
//
// Writes are coalesced: at most Config.MaxConns batches are in flight, and
// writes that arrive while all are busy go out together on the next
// connection that frees up, each followed by its own Sync, so each is still
// its own transaction with its own fence check and its own outcome. One
// round trip then carries several writes; PostgreSQL reads and answers them
// with one system call each, which is most of what a small write costs it.
// A caller that gives up on a write in a shared batch gets an unknown
// outcome; the batch goes on for the others.
//
// Guarantees:
//
//   - A write is applied only if its token is >= the fence's high-water mark,
//     which it raises atomically with the write (equal tokens are accepted:
//     one leader writes many times).
//   - Every error of Exec is a *tokens.RefusalError. Except for
//     BACKEND_UNAVAILABLE with metadata "outcome": "unknown" (the connection
//     failed after the batch was sent), a refusal means nothing was written.
//   - Statements that would end the transaction early or outlive it in the
//     pooled session (BEGIN, COMMIT, ROLLBACK, SAVEPOINT, PREPARE, CALL, DO,
//     SET without LOCAL, ...) are refused before anything is sent. A SQL
//     string holding several statements is refused by PostgreSQL itself
//     (prepared statements hold one command).
//
// What it does not guarantee:
//
//   - It is not a security boundary between fencegate and the caller's SQL.
//     Statements naming the fencegate schema are refused, but a caller could
//     still reach it through search_path, dynamic SQL or functions, and could
//     leave session state behind (set_config) or write outside the
//     transaction (dblink). Grant the role fencegate uses only what the
//     callers' statements need, and keep the fencegate schema owned by a
//     role that is not shared.
//   - Statements a connection has not prepared yet are prepared (one extra
//     round trip) before the batch runs, so a statement cannot use a table
//     created by an earlier statement of the same write: create it in an
//     earlier write.
//   - Read-your-writes across the batch is normal transaction semantics;
//     nothing beyond it. Tokens are int64 in the database: tokens above
//     2^63-1 are refused as invalid.
//   - Connections are pooled with pgxpool (at most Config.MaxConns,
//     recycled after about an hour, closed after ten idle minutes). A
//     connection is pinged before use when it was idle for over a second or
//     released before another connection was found dead, so after a server
//     restart at most about one call per Backend fails on a dropped
//     connection (with BACKEND_UNAVAILABLE, nothing written). That is
//     narrowed, not excluded: a connection can die between the ping and
//     the write.
//
// Statement timeouts are the server's statement_timeout, set once per
// connection in the startup packet; request deadlines come from the ctx of
// each call.
package postgres
