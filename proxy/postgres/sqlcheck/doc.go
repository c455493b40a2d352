// Package sqlcheck decides whether a caller's SQL string may run inside a
// fenced write: after fencegate's own SELECT fencegate.advance($1,$2), in
// the same implicit transaction, on a pooled connection.
//
// It reads the SQL with PostgreSQL's own parser (libpg_query, PostgreSQL
// 17's grammar, through github.com/pganalyze/pg_query_go/v6), so it sees
// what the server sees: comments that end at CR, identifiers that are
// quoted, Unicode-escaped (U&"fenc\0065gate") or split by comments
// (fencegate/**/.fences) all reach it as the names the server resolves.
// No keyword table or regular expression decides anything.
//
// Guarantees, for a string Check accepts:
//
//   - It is exactly one statement, and that statement is a SELECT (with
//     VALUES, TABLE and set operations), INSERT, UPDATE, DELETE or MERGE,
//     each with WITH, or a kind Config.Allow names.
//   - Its whole parse tree, walked through protobuf reflection so that no
//     node kind is skipped, holds no other statement (transaction control,
//     SET or SET LOCAL, COPY, DO, CALL, PREPARE, ...) and no SELECT INTO.
//   - No name in it is qualified by the fencegate schema or a temporary
//     schema (pg_temp, pg_temp_N): relations, functions, types and casts,
//     collations, operator classes, column references of three or more
//     parts, and every other list of names. Names are compared as the
//     parser normalised them, case-sensitively, as PostgreSQL resolves
//     them: "FenceGate" is another schema. No relation in it is temporary.
//   - Operators in it are unqualified or qualified by pg_catalog.
//   - It writes to no system catalog (pg_catalog, information_schema,
//     pg_toast, or an unqualified pg_settings, whose update rule calls
//     set_config).
//   - It calls none of the refused functions (session settings and
//     session-level advisory locks, dblink, server files, large objects,
//     server control, functions that run SQL from a string), whatever
//     schema qualifies them, and sleeps (pg_sleep, pg_sleep_for) only with
//     a constant no longer than Config.MaxSleep.
//   - Statement.Text is the statement alone, ending at a token, so it can
//     be embedded in a WITH.
//
// A statement that may nest deeper than MaxDepth (TooDeep, a lexical
// upper bound) is refused before it reaches the parser, whose C recursion
// would overflow the thread's stack and take the process down; so is one
// PostgreSQL would have refused for its own stack depth, and a generated
// chain of a few thousand operators or UNIONs that it would not.
//
// Every refusal is a *Refusal naming what was refused, the byte where, and
// why. Verdicts are cached by the exact text, bounded by bytes; a cached
// Check takes a read lock and allocates nothing.
//
// What it does not guarantee:
//
//   - It is a filter on the statement's own text, not a security boundary.
//     Views, rules, triggers, defaults and functions already in the
//     database run whatever they run when the statement touches them (a
//     SECURITY DEFINER function running dynamic SQL, a trigger calling
//     dblink): keeping those safe is the operator's job, and the database's
//     privileges are the real boundary. Grant the role fencegate runs
//     callers' SQL as only what their statements need.
//   - Unqualified names resolve through search_path, which it cannot see.
//     A search_path that reaches the fencegate schema would let "fences"
//     mean fencegate.fences; note that the default "$user" does so for a
//     role named fencegate.
//   - Strings that name objects (nextval('s'), 'x'::regclass) are not
//     read; only the functions that run SQL or read tables named in a
//     string are refused.
//   - Long statements: only sleeps are limited, and MaxSleep bounds each
//     call, which may run once per row. generate_series, recursive WITH and
//     joins can run as long as statement_timeout lets them: that is the
//     bound on time.
//   - It assumes standard_conforming_strings is on (PostgreSQL's default
//     since 9.1), as the parser here does: with it off, the server reads
//     backslashes in '...' strings differently. Check the server's
//     parameter status when connecting.
//   - The grammar is PostgreSQL 17's. A server of another major version
//     may refuse what this accepts (then the write fails) or accept what
//     this refuses.
package sqlcheck
