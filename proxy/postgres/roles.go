package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/migrations"
)

// ErrRolesUnsafe is returned by CheckRoles when statements could not be
// kept to the roles they run as. Every refusal of CheckRoles wraps it; its
// other errors say that it could not check (the database did not answer).
var ErrRolesUnsafe = errors.New("postgres: statements cannot be kept to their roles")

// CheckRoles checks that fencegate, as the login it serves as, can run
// callers' statements as each of roles (ExecAs) and that nothing takes
// them past those roles' privileges. It refuses, with one line that says
// what to run or change:
//   - the login being a superuser (a superuser may become any role);
//   - Config.AllowSQL allowing "ddl": a statement could create a function
//     whose body changes the role, beyond what the SQL check sees;
//   - a role the login may not become (not a member: `fencegate grant`),
//     or one migrations.CheckWriterRole refuses (a superuser, a member of
//     fencegate_owner or fencegate_runtime, …);
//   - a SECURITY DEFINER function owned by the login or a role it may
//     become, that one of roles may execute without being a member of its
//     owner (it would run with the owner's privileges), or any function
//     that sets the role or session authorization when called.
//
// With no roles it checks nothing. Call it at start and whenever the set
// of roles changes (a policy reload).
func (b *Backend) CheckRoles(ctx context.Context, roles []string) error {
	if len(roles) == 0 {
		return nil
	}
	if slices.Contains(b.cfg.AllowSQL, "ddl") {
		return fmt.Errorf("%w: --postgres-allow-sql=ddl lets a statement create a function that changes its role; drop ddl, or the policy's postgres_role", ErrRolesUnsafe)
	}
	conn, err := b.acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres: check roles on %s: %w", b.host, err)
	}
	defer b.release(ctx, conn)
	var login string
	var super bool
	if err := conn.QueryRow(ctx, "SELECT session_user, rolsuper FROM pg_catalog.pg_roles WHERE rolname = session_user").Scan(&login, &super); err != nil {
		return fmt.Errorf("postgres: check roles on %s: %w", b.host, err)
	}
	if super {
		return fmt.Errorf("%w: fencegate is logged in to %s as %q, a superuser, which may become any role: serve as a login that is not (fencegate migrate --runtime-role, fencegate grant)", ErrRolesUnsafe, b.host, login)
	}
	for _, role := range roles {
		if err := migrations.CheckWriterRole(ctx, conn.Conn(), login, role); err != nil {
			if errors.Is(err, migrations.ErrUnsafeRole) || errors.Is(err, migrations.ErrNoRole) {
				return fmt.Errorf("%w: postgres_role %q on %s: %w", ErrRolesUnsafe, role, b.host, err)
			}
			return fmt.Errorf("postgres: postgres_role %q on %s: %w", role, b.host, err)
		}
		var member bool
		if err := conn.QueryRow(ctx, "SELECT pg_catalog.pg_has_role(session_user, $1, 'MEMBER')", role).Scan(&member); err != nil {
			return fmt.Errorf("postgres: check role %q on %s: %w", role, b.host, err)
		}
		if !member {
			return fmt.Errorf("%w: fencegate's login %q on %s may not run statements as role %q: run `fencegate grant --postgres-dsn=<an admin DSN> --login=%s --role=%s`",
				ErrRolesUnsafe, login, b.host, role, login, role)
		}
	}
	// Functions that would take a statement past its role. A function
	// whose body runs SET ROLE or set_config('role', …) is beyond this
	// check: see docs/SECURITY.md, "PostgreSQL roles".
	var fn *string
	err = conn.QueryRow(ctx, `
SELECT p.oid::pg_catalog.regprocedure::text
  FROM pg_catalog.pg_proc p
 WHERE (p.prosecdef AND pg_catalog.pg_has_role(session_user, p.proowner, 'MEMBER')
        AND EXISTS (SELECT FROM pg_catalog.unnest($1::text[]) r
                     WHERE pg_catalog.has_function_privilege(r, p.oid, 'EXECUTE')
                       AND NOT pg_catalog.pg_has_role(r, p.proowner, 'USAGE')))
    OR EXISTS (SELECT FROM pg_catalog.unnest(p.proconfig) c
                WHERE c OPERATOR(pg_catalog.~~) 'role=%' OR c OPERATOR(pg_catalog.~~) 'session\_authorization=%')
 ORDER BY 1 LIMIT 1`, roles).Scan(&fn)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("postgres: check functions on %s: %w", b.host, err)
	}
	if fn != nil {
		return fmt.Errorf("%w: function %s on %s sets the role, or is SECURITY DEFINER, owned by fencegate's login %q or one of its roles and executable by another: a statement calling it would leave its role; drop it, or revoke EXECUTE on it from PUBLIC and the roles",
			ErrRolesUnsafe, *fn, b.host, login)
	}
	return nil
}
