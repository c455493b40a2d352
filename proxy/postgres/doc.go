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
//   - Callers' statements are checked with PostgreSQL's own parser
//     (package sqlcheck) before anything is sent: one SELECT, INSERT,
//     UPDATE, DELETE or MERGE per string (Config.AllowSQL widens this),
//     nothing that ends, splits or outlives the transaction, nothing naming
//     schema fencegate or a temporary object, no call to functions that
//     change the session or reach outside the database. Refusals are
//     INVALID_REQUEST naming the statement, what was refused and where.
//   - The fence check is out of the statements' reach (migration 003):
//     fencegate.advance is SECURITY DEFINER with a pinned search_path and
//     schema-qualified operators, owned by fencegate_owner, and runs once
//     per transaction; the role fencegate serves as (CheckRole) is a member
//     of fencegate_runtime, which may only call it and read the fences, and
//     is neither a superuser nor the owner unless the caller allows it.
//   - ExecAs runs a write's statements as a PostgreSQL role: the fence
//     check's own statement sets it for the rest of the transaction
//     (set_config('role', …, true)), so it costs no round trip, ends with
//     the write, and statements get that role's privileges and no more:
//     the SQL check refuses every way to change it (SET, RESET,
//     set_config, DO, transaction control), and CheckRoles refuses to
//     serve roles as a superuser, with DDL allowed, or while a function
//     that would leave the role exists (docs/SECURITY.md, "PostgreSQL roles").
//   - A write is acknowledged only when PostgreSQL confirmed it: every
//     statement's CommandComplete, none of them a transaction command, and
//     ReadyForQuery idle ('I') after its Sync. Anything else closes the
//     connection, and the write and those after it in the batch get
//     BACKEND_UNAVAILABLE with an unknown outcome. A batch after which a
//     setting PostgreSQL reports (ParameterStatus) differs from when the
//     connection was opened closes its connection.
//   - A statement that returns rows runs inside a result guard (a
//     MATERIALIZED WITH and fencegate.check_result): over Config's
//     MaxResultRows or MaxResultBytes (the write's statements together) it
//     fails inside the database, so the write rolls back and fencegate
//     never holds the result.
//   - Config.WriteTimeout bounds each write as a whole: past it, fencegate
//     sends a cancel request and the write rolls back (statement_timeout
//     still bounds each statement).
//
// What it does not guarantee:
//
//   - Functions already in the database run with the rights their owner
//     gave them: a SECURITY DEFINER function of the application's that runs
//     dynamic SQL, or one that changes settings PostgreSQL does not report
//     (search_path, statement_timeout), is beyond what the parser can see.
//     The database's privileges are the boundary: grant the runtime role
//     only what the callers' statements need, no TEMPORARY on the database
//     (README, "Database roles").
//   - Statements a connection has not prepared yet are prepared (one extra
//     round trip) before the batch runs, so a statement cannot use a table
//     created by an earlier statement of the same write: create it in an
//     earlier write. Parsing runs code (a literal's input function, a
//     domain's CHECK), so a caller's statement is parsed only after its
//     write's fence check, as its role, in a transaction that then rolls
//     back: a stale write is refused before anything of it is parsed, and
//     what parsing ran is undone (the write runs the check again).
//   - Each message read from the server is bounded (4 × MaxResultBytes +
//     1 MiB, at least 8 MiB): one over it (an error quoting megabytes of
//     input) closes the connection unread; an error refuses the write
//     with STATEMENT_FAILED, rolled back, anything else with
//     BACKEND_UNAVAILABLE and an unknown outcome.
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
// connection in the startup packet; the write's time limit is
// Config.WriteTimeout; request deadlines come from the ctx of each call.
package postgres
