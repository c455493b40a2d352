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

// EndSession terminates the backend of process pid, a session BindSession
// bound that is still logged in as its login, and ends its binding: the
// listener's way to stop a statement that traps the cancel it sent when
// it ended the session (migration 009). It says whether it terminated
// one.
func (b *Backend) EndSession(ctx context.Context, pid uint32) (bool, error) {
	conn, err := b.acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("postgres: end session %d: %w", pid, err)
	}
	defer b.release(ctx, conn)
	var ended bool
	if err := conn.QueryRow(ctx, endSessionSQL, int32(pid)).Scan(&ended); err != nil {
		return false, fmt.Errorf("postgres: end session %d: %w", pid, err)
	}
	return ended, nil
}

// Typed, as the fence check's parameters are (typedParams).
const (
	bindSessionSQL = "SELECT fencegate.bind_session($1::pg_catalog.int4, $2::pg_catalog.name, " +
		"$3::pg_catalog.text, $4::pg_catalog.text, $5::pg_catalog.text)"
	unbindSessionSQL = "SELECT fencegate.unbind_session($1::pg_catalog.int4)"
	endSessionSQL    = "SELECT fencegate.end_session($1::pg_catalog.int4)"
)
