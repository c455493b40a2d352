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
//   - table fencegate.schema_version: tern's record of the applied version.
//
// Apply is idempotent and safe to run from several replicas at once: it holds
// a PostgreSQL session advisory lock while it creates the schema and runs
// tern (which takes its own advisory lock too), so concurrent runs apply each
// migration exactly once and all return after the schema is complete. A
// database migrated by a newer fencegate (a higher version than this binary
// knows) is left alone, so an older replica can still start during a rolling
// upgrade; migrations must therefore stay backward compatible.
//
// Apply does not create the database or roles, and it does not migrate down.
package migrations
