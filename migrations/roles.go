package migrations

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ErrUnsafeRole is the error of CheckWriterRole and GrantRole for a role
// that statements must not run as: one that reaches past its own tables.
var ErrUnsafeRole = errors.New("migrations: unsafe role")

// ErrNoRole is the error of CheckWriterRole and GrantRole for a role that
// does not exist.
var ErrNoRole = errors.New("migrations: no such role")

// CheckWriterRole checks that statements may safely run as role, with
// fencegate logged in as login, on conn's database: both exist, differ,
// and role is not named pg_* or fencegate_*, and is neither a superuser
// nor has BYPASSRLS or CREATEROLE, nor is a member of a role that is or
// has them, of a predefined pg_* role, of OwnerRole or RuntimeRole, or of
// login; nor may it, or a role it is a member of, do more on schema
// fencegate than PUBLIC may (schemaReach: write fencegate.fences, run
// reset, create objects there). PostgreSQL lets a session become any role
// its login is a member of, so whatever role reaches, every write as any
// role of login's reaches too. It does not check that login is a member
// of role (see GrantRole). Errors are one line, wrapping ErrUnsafeRole for an unsafe
// role and ErrNoRole for a missing one.
func CheckWriterRole(ctx context.Context, conn *pgx.Conn, login, role string) error {
	if err := checkWriterRole(ctx, conn, login, role); err != nil {
		return err
	}
	return checkSchemaReach(ctx, conn, role)
}

// checkWriterRole is CheckWriterRole but for what role may do on schema
// fencegate.
func checkWriterRole(ctx context.Context, conn *pgx.Conn, login, role string) error {
	switch {
	case login == "":
		return errors.New("migrations: empty login role name")
	case role == "":
		return errors.New("migrations: empty role name")
	case role == login:
		return fmt.Errorf("%w: role %q is fencegate's login itself: statements would run with all its rights", ErrUnsafeRole, role)
	case strings.HasPrefix(role, "pg_"):
		return fmt.Errorf("%w: role %q is a name reserved for PostgreSQL's predefined roles", ErrUnsafeRole, role)
	case strings.HasPrefix(role, "fencegate_"):
		return fmt.Errorf("%w: role %q is a name reserved for fencegate's own roles", ErrUnsafeRole, role)
	case role == "none":
		return fmt.Errorf("%w: role %q means no role to SET ROLE", ErrUnsafeRole, role)
	}
	for _, r := range []string{login, role} {
		var exists bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = $1)", r).Scan(&exists); err != nil {
			return fmt.Errorf("migrations: check role %q: %w", r, err)
		}
		if !exists {
			return fmt.Errorf("%w: role %q does not exist: create it first (CREATE ROLE ... NOLOGIN for a writer role)", ErrNoRole, r)
		}
	}
	// The first of the role's own attributes and memberships that reach
	// past its tables, or NULL. pg_has_role(…, 'MEMBER') follows
	// memberships transitively, inherited or not, as SET ROLE does.
	var why *string
	err := conn.QueryRow(ctx, `
SELECT CASE
  WHEN r.rolsuper THEN 'is a superuser'
  WHEN r.rolbypassrls THEN 'has BYPASSRLS'
  WHEN r.rolcreaterole THEN 'has CREATEROLE'
  WHEN pg_catalog.pg_has_role(r.oid, $2, 'MEMBER') THEN 'is a member of fencegate''s login ' || pg_catalog.quote_ident($2) || ' (a cycle)'
  ELSE (SELECT 'is a member of ' || pg_catalog.quote_ident(o.rolname) ||
               CASE WHEN o.rolsuper THEN ', a superuser'
                    WHEN o.rolbypassrls THEN ', which has BYPASSRLS'
                    WHEN o.rolcreaterole THEN ', which has CREATEROLE'
                    ELSE '' END
          FROM pg_catalog.pg_roles o
         WHERE o.oid OPERATOR(pg_catalog.<>) r.oid
           AND (o.rolsuper OR o.rolbypassrls OR o.rolcreaterole
                OR o.rolname OPERATOR(pg_catalog.=) ANY (ARRAY[$3, $4]::text[])
                OR o.rolname OPERATOR(pg_catalog.~~) 'pg\_%')
           AND pg_catalog.pg_has_role(r.oid, o.oid, 'MEMBER')
         ORDER BY o.rolname LIMIT 1)
END
FROM pg_catalog.pg_roles r WHERE r.rolname OPERATOR(pg_catalog.=) $1`, role, login, OwnerRole, RuntimeRole).Scan(&why)
	if err != nil {
		return fmt.Errorf("migrations: check role %q: %w", role, err)
	}
	if why != nil {
		return fmt.Errorf("%w: role %q %s: statements running as it could reach past its own tables", ErrUnsafeRole, role, *why)
	}
	return nil
}

// schemaReach is the first thing on schema fencegate that role, or a role
// it is a member of, may do beyond what PUBLIC may, or no row: CREATE on
// the schema; any privilege but SELECT on its tables and sequences (its
// views too); EXECUTE on a function PUBLIC may not execute. Privileges
// are PostgreSQL's effective ones (has_*_privilege): granted to a group,
// or by a grantor other than the owner, they count too.
const schemaReach = `
SELECT pg_catalog.format('%s %s', CASE WHEN g.rolname OPERATOR(pg_catalog.=) $1 THEN 'may'
                                       ELSE pg_catalog.format('is a member of %I, which may', g.rolname) END, w.what)
  FROM pg_catalog.pg_roles g
 CROSS JOIN LATERAL (
       SELECT 'CREATE in schema fencegate' AS what
        WHERE pg_catalog.has_schema_privilege(g.oid, 'fencegate', 'CREATE')
       UNION ALL
       SELECT pg_catalog.format('%s on %s', p.p, c.oid::pg_catalog.regclass)
         FROM pg_catalog.pg_class c
        CROSS JOIN pg_catalog.unnest(CASE WHEN c.relkind OPERATOR(pg_catalog.=) 'S' THEN ARRAY['USAGE', 'UPDATE']
                                          ELSE ARRAY['INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER'] END) AS p(p)
        WHERE c.relnamespace OPERATOR(pg_catalog.=) 'fencegate'::pg_catalog.regnamespace
          AND c.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['r', 'p', 'v', 'm', 'f', 'S']::"char"[])
          AND CASE WHEN c.relkind OPERATOR(pg_catalog.=) 'S' THEN pg_catalog.has_sequence_privilege(g.oid, c.oid, p.p)
                   ELSE pg_catalog.has_table_privilege(g.oid, c.oid, p.p) END
       UNION ALL
       SELECT pg_catalog.format('EXECUTE on %s', f.oid::pg_catalog.regprocedure)
         FROM pg_catalog.pg_proc f
        WHERE f.pronamespace OPERATOR(pg_catalog.=) 'fencegate'::pg_catalog.regnamespace
          AND f.proacl IS NOT NULL
          AND NOT EXISTS (SELECT FROM pg_catalog.aclexplode(f.proacl) AS a
                           WHERE a.grantee OPERATOR(pg_catalog.=) 0 AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE')
          AND pg_catalog.has_function_privilege(g.oid, f.oid, 'EXECUTE')
       ) AS w
 WHERE pg_catalog.pg_has_role($1, g.oid, 'MEMBER')
 ORDER BY g.rolname OPERATOR(pg_catalog.=) $1, g.rolname, w.what
 LIMIT 1`

// checkSchemaReach refuses role when it reaches fencegate's schema
// (schemaReach).
func checkSchemaReach(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, role string,
) error {
	var why string
	switch err := q.QueryRow(ctx, schemaReach, role).Scan(&why); {
	case errors.Is(err, pgx.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("migrations: check role %q on schema fencegate: %w", role, err)
	}
	return fmt.Errorf("%w: role %q %s: statements running as it could move fences' marks; revoke that (fencegate grant revokes only what was granted to the role itself, by the objects' owner)", ErrUnsafeRole, role, why)
}

// GrantRole lets fencegate, logged in as the existing role login, run
// callers' statements as the existing role role (a policy rule's
// postgres_role): it checks role with CheckWriterRole, makes login a
// member of role, and revokes whatever was granted to role itself on
// schema fencegate (it keeps what PUBLIC has: the schema's use and
// fencegate.check_result, which the result guard calls). conn must be
// allowed to grant role (a superuser, a role with CREATEROLE, or one with
// ADMIN OPTION on role) and fencegate's schema must be applied (Apply).
// Granting twice is harmless.
func GrantRole(ctx context.Context, conn *pgx.Conn, login, role string) error {
	var migrated bool
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.to_regprocedure('fencegate.advance(text, bigint)') IS NOT NULL").Scan(&migrated); err != nil {
		return fmt.Errorf("migrations: grant role %q: %w", role, err)
	}
	if !migrated {
		return fmt.Errorf("migrations: fencegate's schema is missing on this database: run `fencegate migrate --postgres-dsn=<an admin DSN> --runtime-role=%s` first", login)
	}
	// What CheckWriterRole checks of the schema is checked once the
	// grants made to role itself are revoked, below.
	if err := checkWriterRole(ctx, conn, login, role); err != nil {
		return err
	}
	r, l := pgx.Identifier{role}.Sanitize(), pgx.Identifier{login}.Sanitize()
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, sql := range []string{
			"GRANT " + r + " TO " + l,
			"REVOKE ALL ON SCHEMA fencegate FROM " + r,
			"REVOKE ALL ON ALL TABLES IN SCHEMA fencegate FROM " + r,
			"REVOKE ALL ON ALL SEQUENCES IN SCHEMA fencegate FROM " + r,
			"REVOKE ALL ON ALL FUNCTIONS IN SCHEMA fencegate FROM " + r,
		} {
			if _, err := tx.Exec(ctx, sql); err != nil {
				return fmt.Errorf("%s: %w", sql, err)
			}
		}
		// What is left came through a group, or from another grantor:
		// refused, and the grant above rolled back.
		return checkSchemaReach(ctx, tx, role)
	})
	if errors.Is(err, ErrUnsafeRole) {
		return err
	}
	if err != nil {
		return fmt.Errorf("migrations: grant role %q to %q: %w", role, login, err)
	}
	return nil
}
