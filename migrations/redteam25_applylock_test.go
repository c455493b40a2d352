package migrations_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/migrations"
)

// TestRedTeam25AnyLoginBlocksApply:
//
// Attack: a login with no privilege at all (a PostgreSQL listener
// client's, which fencegate serves with a rule allowing sql.write on one
// fence; or any other role of the database) runs
// SELECT pg_advisory_lock(7378707013443183988), the key Apply holds
// (0x66656e6365676174, "fencegat", a constant in the open source), and
// keeps its session open. Advisory locks take no privilege: any role may
// lock any key.
//
// What happened (on this code): Apply takes that session lock before it
// does anything else, even on a schema that is already at the latest
// version, and waits for it with statement_timeout 0 (migrate sets it so):
// `fencegate migrate`, `serve --postgres-migrate-dsn` (every replica that
// migrates at start, in a rolling restart all of them), fencebench and
// the throwaway dev servers hang until their context ends. Here Apply on
// an up-to-date database waits out its whole 3 s deadline and fails with
// the context's error, the lock held by a role that owns nothing.
//
// What should happen: a role that can change nothing of fencegate's
// cannot stop it from starting. Apply reads the version first and returns
// at once when there is nothing to migrate, and serialises migrations
// with a lock that only roles that may migrate can take (a lock on a
// table of schema fencegate, or the schema's version row), or at least
// bounds the wait and names the session holding the key.
//
// Severity: medium (availability): any database login, the listener's
// clients among them, keeps every migrating fencegate replica from
// starting, for as long as it keeps a session open.
func TestRedTeam25AnyLoginBlocksApply(t *testing.T) {
	dsn := freshDB(t)
	admin := connect(t, dsn)
	if err := migrations.Apply(t.Context(), admin); err != nil {
		t.Fatal(err)
	}
	role := fmt.Sprintf("rt25_%d", dbSeq.Add(1))
	if _, err := admin.Exec(t.Context(), "CREATE ROLE "+role+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.User = role
	squatter, err := pgx.ConnectConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = squatter.Close(context.WithoutCancel(t.Context())) })
	if _, err := squatter.Exec(t.Context(), "SELECT pg_advisory_lock($1)", int64(0x66656e6365676174)); err != nil {
		t.Fatalf("an unprivileged login takes Apply's advisory lock: %v", err)
	}

	// A replica starting: the schema is up to date, there is nothing to do.
	mig := connect(t, dsn)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	start := time.Now()
	err = migrations.Apply(ctx, mig)
	if err != nil || time.Since(start) > 2*time.Second {
		t.Fatalf("Apply on an up-to-date schema, with an unprivileged role %q holding key 0x66656e6365676174: "+
			"returned %v after %v; a login that may change nothing of fencegate's blocks every migrating replica's start",
			role, err, time.Since(start).Round(time.Millisecond))
	}
}
