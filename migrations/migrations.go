package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"
)

// StaleSQLState is the SQLSTATE fencegate.advance raises for a token below
// the fence's high-water mark. Its DETAIL is "high_water=<n>".
const StaleSQLState = "FG001"

// TermEndedSQLState and UnknownTermSQLState are what
// fencegate.advance_term raises for a token whose term is over (no session
// holds the election's advisory lock exclusively) and for one above the
// current term (or a fence with no term row). LockKeySharedSQLState (from
// version 11) is what it raises for a token that is its row's term when
// another row of the term table derives the same advisory lock key: the
// lock cannot tell the two elections' leaders apart, so neither term can
// be told current. Their DETAIL, and that of its FG001, is "term=<n>".
const (
	TermEndedSQLState     = "FG002"
	UnknownTermSQLState   = "FG003"
	LockKeySharedSQLState = "FG008"
)

// VersionTable is where tern records the applied schema version.
const VersionTable = "fencegate.schema_version"

// lockKey is the advisory lock Apply holds; arbitrary, distinct from tern's.
const lockKey int64 = 0x66656e6365676174 // "fencegat"

//go:embed sql/*.sql
var files embed.FS

// FS returns the migration files: NNN_name.sql, in tern's format.
func FS() fs.FS {
	sub, err := fs.Sub(files, "sql")
	if err != nil {
		panic(err) // the embedded directory always exists
	}
	return sub
}

// Apply brings fencegate's schema up to the latest version on conn. It is
// idempotent and safe to call concurrently from many processes (see the
// package doc). It changes conn's session state: it runs RESET ALL after each
// migration. A schema already up to date is read and left alone without
// the advisory lock, which any role may take. The waits on the advisory
// lock are subject to conn's statement_timeout and lock_timeout;
// cancelling ctx aborts the wait, in which case the caller should close
// conn rather than reuse it.
func Apply(ctx context.Context, conn *pgx.Conn) (err error) {
	// Up to date, the common case of a replica starting: nothing to
	// change, so no lock to wait for. Any role may take any advisory
	// lock, and one holding lockKey would otherwise hold up every
	// replica's start (TestRedTeam25AnyLoginBlocksApply).
	if err := checkPrecreated(ctx, conn); err != nil {
		return err
	}
	if current, err := Version(ctx, conn); err != nil {
		return err
	} else if current >= Latest() {
		return nil
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", lockKey); err != nil {
		return fmt.Errorf("migrations: take advisory lock: %w", err)
	}
	defer func() {
		// Released even when ctx is done: a session lock outlives the
		// request that took it.
		_, unlockErr := conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", lockKey)
		if err == nil && unlockErr != nil {
			err = fmt.Errorf("migrations: release advisory lock: %w", unlockErr)
		}
	}()
	if err := checkPrecreated(ctx, conn); err != nil {
		return err
	}
	// tern's version table lives in the schema, so it must exist first.
	if _, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS fencegate"); err != nil {
		return fmt.Errorf("migrations: create schema fencegate: %w", err)
	}
	m, err := migrate.NewMigrator(ctx, conn, VersionTable)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	if err := m.LoadMigrations(FS()); err != nil {
		return fmt.Errorf("migrations: load: %w", err)
	}
	current, err := m.GetCurrentVersion(ctx)
	if err != nil {
		return fmt.Errorf("migrations: read version: %w", err)
	}
	if latest := Latest(); current >= latest {
		// Up to date, or migrated by a newer fencegate: leave it alone.
		return nil
	}
	if err := m.Migrate(ctx); err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	return nil
}

// untrustedObject is the first thing in a schema fencegate that exists
// before Apply creates it whose owner is none of OwnerRole, the migrating
// role or a superuser: the schema itself, a table (of any kind), function,
// type, or a trigger's function on one of its tables. tern updates the
// version table as the migrating role, and the migrations replace the
// schema's functions, so such an owner's triggers and code would run with
// the migrating role's rights (TestRedTeam20PrecreatedSchemaVersionTrigger).
const untrustedObject = `
WITH trusted(oid) AS (
  SELECT r.oid FROM pg_catalog.pg_roles AS r
   WHERE r.rolsuper OR r.rolname OPERATOR(pg_catalog.=) $1 OR r.oid OPERATOR(pg_catalog.=) (SELECT u.oid FROM pg_catalog.pg_roles AS u WHERE u.rolname OPERATOR(pg_catalog.=) CURRENT_USER)
), ns AS (
  SELECT n.oid, n.nspowner FROM pg_catalog.pg_namespace AS n WHERE n.nspname OPERATOR(pg_catalog.=) 'fencegate'
)
SELECT what, pg_catalog.pg_get_userbyid(owner) FROM (
  SELECT 0 AS ord, 'schema fencegate' AS what, ns.nspowner AS owner FROM ns
  UNION ALL
  SELECT 1, pg_catalog.format('table %s', c.oid::pg_catalog.regclass), c.relowner
    FROM pg_catalog.pg_class AS c JOIN ns ON c.relnamespace OPERATOR(pg_catalog.=) ns.oid
  UNION ALL
  SELECT 2, pg_catalog.format('function %s', p.oid::pg_catalog.regprocedure), p.proowner
    FROM pg_catalog.pg_proc AS p JOIN ns ON p.pronamespace OPERATOR(pg_catalog.=) ns.oid
  UNION ALL
  SELECT 3, pg_catalog.format('type %s', t.oid::pg_catalog.regtype), t.typowner
    FROM pg_catalog.pg_type AS t JOIN ns ON t.typnamespace OPERATOR(pg_catalog.=) ns.oid
  UNION ALL
  SELECT 4, pg_catalog.format('trigger %I on %s (function %s)', g.tgname, g.tgrelid::pg_catalog.regclass, g.tgfoid::pg_catalog.regprocedure), p.proowner
    FROM pg_catalog.pg_trigger AS g
    JOIN pg_catalog.pg_class AS c ON c.oid OPERATOR(pg_catalog.=) g.tgrelid
    JOIN ns ON c.relnamespace OPERATOR(pg_catalog.=) ns.oid
    JOIN pg_catalog.pg_proc AS p ON p.oid OPERATOR(pg_catalog.=) g.tgfoid
   WHERE NOT g.tgisinternal
) AS o
WHERE NOT EXISTS (SELECT FROM trusted WHERE trusted.oid OPERATOR(pg_catalog.=) o.owner)
ORDER BY ord, what
LIMIT 1`

// checkPrecreated refuses a schema fencegate made, or filled, by a role
// Apply cannot trust (untrustedObject).
func checkPrecreated(ctx context.Context, conn *pgx.Conn) error {
	var what, owner string
	switch err := conn.QueryRow(ctx, untrustedObject, OwnerRole).Scan(&what, &owner); {
	case errors.Is(err, pgx.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("migrations: check schema fencegate: %w", err)
	}
	return fmt.Errorf("migrations: %s is owned by %q, neither %s, the migrating role nor a superuser: its owner's code would run with the migrating role's rights; drop it or check what it holds, then migrate again", what, owner, OwnerRole)
}

// Latest returns the schema version this binary's migrations lead to.
func Latest() int32 {
	names, err := migrate.FindMigrations(FS())
	if err != nil {
		panic(err)
	}
	return int32(len(names))
}

// Version returns the schema version applied on conn's database, 0 if none.
func Version(ctx context.Context, conn *pgx.Conn) (int32, error) {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.to_regclass($1) IS NOT NULL", VersionTable).Scan(&exists); err != nil {
		return 0, fmt.Errorf("migrations: read version: %w", err)
	}
	if !exists {
		return 0, nil
	}
	var v int32
	if err := conn.QueryRow(ctx, "SELECT version FROM "+VersionTable).Scan(&v); err != nil {
		return 0, fmt.Errorf("migrations: read version: %w", err)
	}
	return v, nil
}

// Roles made by the schema (migration 003).
const (
	// OwnerRole owns everything in schema fencegate. It cannot log in.
	OwnerRole = "fencegate_owner"
	// RuntimeRole may call fencegate.advance and read the fences, and
	// nothing else on schema fencegate. The role fencegate serves as must be
	// a member of it (GrantRuntime), and must be neither OwnerRole nor a
	// superuser.
	RuntimeRole = "fencegate_runtime"
)

// GrantRuntime makes role a member of RuntimeRole, so fencegate can serve
// logged in as role. conn must be allowed to grant RuntimeRole (a
// superuser, or the role that ran Apply). Granting twice is harmless.
func GrantRuntime(ctx context.Context, conn *pgx.Conn, role string) error {
	if role == "" {
		return fmt.Errorf("migrations: grant %s: empty role name", RuntimeRole)
	}
	sql := "GRANT " + RuntimeRole + " TO " + pgx.Identifier{role}.Sanitize()
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("migrations: grant %s to %q: %w", RuntimeRole, role, err)
	}
	return nil
}
