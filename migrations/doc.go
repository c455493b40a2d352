// Package migrations holds fencegate's own PostgreSQL schema as SQL files
// embedded in the binary, and applies them with tern.
//
// The schema is:
//
//   - schema fencegate;
//   - table fencegate.fences(name text primary key, token bigint, updated_at
//     timestamptz): the high-water mark of every fence;
//   - function fencegate.advance(fence text, token bigint) returns bigint:
//     accepts a token not below the fence's mark and raises the mark to it,
//     leaving the fence row locked until commit (shared for a token equal to
//     the mark, exclusively for one that raises it); a lower token raises
//     SQLSTATE FG001 (StaleSQLState) with DETAIL 'high_water=<n>';
//   - table fencegate.schema_version: tern's record of the applied version;
//   - function fencegate.check_result: the result guard proxy/postgres wraps
//     around statements that return rows (raises SQLSTATE FG007);
//   - roles fencegate_owner (owns all of the above; cannot log in) and
//     fencegate_runtime (may call advance and read fences and the version,
//     nothing else). GrantRuntime makes a login role a member of it.
//
// From version 3 advance is SECURITY DEFINER with search_path pinned to
// pg_catalog, pg_temp and schema-qualified operators, so nothing in the
// caller's session (search path, operators, temp objects) changes what it
// computes; and it runs once per transaction (SQLSTATE FG006 for a second
// call), so a statement of the caller's cannot advance another fence in a
// write fencegate has already checked.
//
// From version 6 advance runs one query when the token is the fence's mark
// (a locked read of the row where it is), and version 3's path otherwise.
//
// From version 7 advance and advance_term run only as their transaction's
// first statement: a transaction that already has an id (every check that
// passed has one, from the fence row it locked or wrote) is refused with
// SQLSTATE FG006. Version 3's once-per-transaction rule rested on a
// setting, which a caller's RESET ALL, or set_config in dynamic SQL,
// clears. The check itself is fencegate.advance_mark, which only
// fencegate_owner may run. In a read-only transaction, where PostgreSQL
// locks no row, advance judges the token by the mark it reads and raises
// none.
//
// The first-statement rule does not see a savepoint set before the check:
// a transaction that runs the check inside one and then rolls back to it
// loses the check's row lock, or swallows its refusal, and writes on
// unfenced (red team 24, 2026-11-29). A subtransaction has no id of its
// own until it writes, so PL/pgSQL cannot tell it apart cheaply. The
// check's callers close the gap instead: the SQL Exec path runs it as the
// transaction's first statement, and the PostgreSQL listener puts it in
// front of a client's SAVEPOINT (only BEGIN, START TRANSACTION and SET
// TRANSACTION come before it). A login of fencegate_runtime calling
// advance by hand can do this, as it can call advance with any token.
//
// From version 8 the PostgreSQL listener's check is advance_session(fence,
// token), which anyone may run and which checks only the fence its session
// is bound to (table fencegate.sessions, written only by bind_session and
// unbind_session, which fencegate_runtime may run from fencegate's pool).
// A listener client's login needs no fencegate role, so one that replaces
// the check on its connection cannot reach advance or reset for another
// fence.
//
// From version 9 end_session(pid), which fencegate_runtime may run,
// terminates the backend of a listener session fencegate bound (still
// logged in as its login, never a superuser's) and ends its binding:
// fencegate's way to stop a statement that traps the cancel it sent when
// it ended the session mid-statement, which would otherwise run on
// holding the fence's row. It needs pg_signal_backend, which the
// migration grants fencegate_owner.
//
// From version 10 advance_term counts only an exclusive advisory lock on
// the election's key (pg_locks mode ExclusiveLock): a shared one
// (pg_advisory_lock_shared), which any number of sessions may hold at
// once, no longer keeps an ended term current.
//
// From version 11 advance_term refuses a token that is its row's term with
// SQLSTATE FG008 (LockKeySharedSQLState) when another row of the term
// table derives the same lock key (two names with one hashtext): a
// session holding that key may lead either election. It looks for such a
// row in the same statement that reads the fence's term row.
//
// From version 12 advance_term refuses with SQLSTATE FG006, before
// reading it, a term table whose reading could run code another role
// chose: fencegate.term_table_problem (which anyone may run; pgterm runs
// it at start, with deep also for what ANALYZE and REINDEX run as the
// table's owner) names the problem. fencegate_owner owns tern's version
// table.
//
// From version 13 end_session terminates only a backend of this database
// whose login is no member of fencegate_runtime, whatever was bound.
//
// From version 14 bind_session binds only a live backend of this database
// logged in as the login it names, and refuses anything else with
// SQLSTATE 22023.
//
// Apply refuses a schema fencegate that exists before it and belongs to,
// or holds a table, function, type or trigger of, a role other than
// fencegate_owner, the migrating role or a superuser: tern would update
// the version table, and run the migrations, with the migrating role's
// rights next to that role's code.
//
// Apply is idempotent and safe to run from several replicas at once: it holds
// a PostgreSQL session advisory lock while it creates the schema and runs
// tern (which takes its own advisory lock too), so concurrent runs apply each
// migration exactly once and all return after the schema is complete. A
// database migrated by a newer fencegate (a higher version than this binary
// knows) is left alone, so an older replica can still start during a rolling
// upgrade; migrations must therefore stay backward compatible. A schema
// already up to date is read without the lock: any role may take any
// advisory lock, and one that holds Apply's then holds up only an upgrade,
// not every replica's start.
//
// Apply does not create the database or login roles, and it does not
// migrate down. It needs a role that may create schemas and roles (a
// superuser, or one with CREATEROLE that then becomes a member of
// fencegate_owner) and, from version 9, grant pg_signal_backend (a
// superuser; on PostgreSQL 16 and later, a role with ADMIN OPTION on it).
package migrations
