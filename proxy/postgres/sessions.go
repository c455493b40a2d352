package postgres

import (
	"context"
	"fmt"
)

// BindSession binds the database session of process pid, logged in as
// login, to fence: that session's fence check
// (fencegate.advance_session, which the PostgreSQL listener prepares on
// it) then checks fence and no other, with the fence's postgres-term
// check when Config.TermCheck names one. The listener binds each session
// after the database accepted its login and before its client may send
// anything, so a client that replaces the check it was given still
// cannot move another fence's mark: its login needs none of
// fencegate_runtime's rights.
func (b *Backend) BindSession(ctx context.Context, pid uint32, login, fence string) error {
	var table, lockKey *string
	if b.cfg.TermCheck != nil {
		if tc, ok := b.cfg.TermCheck(fence); ok {
			table, lockKey = &tc.Table, &tc.LockKey
		}
	}
	conn, err := b.acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres: bind session %d to fence %q: %w", pid, fence, err)
	}
	defer b.release(ctx, conn)
	if _, err := conn.Exec(ctx, bindSessionSQL, int32(pid), login, fence, table, lockKey); err != nil {
		return fmt.Errorf("postgres: bind session %d to fence %q: %w", pid, fence, err)
	}
	return nil
}

// UnbindSession ends the binding of process pid's session. Bindings of
// sessions that have ended go at the next BindSession too, so a failure
// here leaves nothing that outlives the session for long.
func (b *Backend) UnbindSession(ctx context.Context, pid uint32) error {
	conn, err := b.acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres: unbind session %d: %w", pid, err)
	}
	defer b.release(ctx, conn)
	if _, err := conn.Exec(ctx, unbindSessionSQL, int32(pid)); err != nil {
		return fmt.Errorf("postgres: unbind session %d: %w", pid, err)
	}
	return nil
}

// Typed, as the fence check's parameters are (typedParams).
const (
	bindSessionSQL = "SELECT fencegate.bind_session($1::pg_catalog.int4, $2::pg_catalog.name, " +
		"$3::pg_catalog.text, $4::pg_catalog.text, $5::pg_catalog.text)"
	unbindSessionSQL = "SELECT fencegate.unbind_session($1::pg_catalog.int4)"
)
