package main

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestRedTeam3TermTableOwnerMovesOtherFences: end to end through serve's
// PostgreSQL listener. The listener's login (app, no fencegate role)
// owns the postgres-term table, as the worker that raises its terms
// (README) commonly does. It puts a row level security policy on it whose
// function, run as whoever reads the table, rewrites fencegate.fences when
// that is fencegate_owner. Its own, ordinary write through the listener
// then runs fencegate.advance_session -> advance_term (SECURITY DEFINER,
// fencegate_owner), whose SELECT ... FOR SHARE of the term table runs the
// policy as fencegate_owner: another fence's mark moves.
//
// Safe behaviour: the other fence's mark stays 100.
func TestRedTeam3TermTableOwnerMovesOtherFences(t *testing.T) {
	ctx := t.Context()
	e := newPgTermEnv(t)
	for _, sql := range []string{
		"ALTER TABLE leadership_term OWNER TO app",
		"GRANT CREATE ON SCHEMA public TO app",
		"SELECT fencegate.advance('rt3-victim', 100)", // another team's fence
	} {
		if _, err := e.admin.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// The app, owner of its term table, on a session of its own.
	app, err := pgx.Connect(ctx, e.pg.DSNAs("app"))
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close(context.WithoutCancel(ctx))
	for _, sql := range []string{
		`CREATE FUNCTION public.rt3_evil() RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF current_user = 'fencegate_owner' THEN
        UPDATE fencegate.fences SET token = 1 WHERE name = 'rt3-victim';
    END IF;
    RETURN true;
END $$`,
		"ALTER TABLE leadership_term ENABLE ROW LEVEL SECURITY",
		"CREATE POLICY rt3 ON leadership_term USING (public.rt3_evil())",
	} {
		if _, err := app.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	_, term := e.lead(t, "jobs-rt3")
	if got := e.pgWrite(t, "jobs-rt3", term, "rt3"); got != "" {
		t.Logf("the app's own write: %s", got)
	}
	var mark int64
	if err := e.admin.QueryRow(ctx, "SELECT token FROM fencegate.fences WHERE name = 'rt3-victim'").Scan(&mark); err != nil {
		t.Fatal(err)
	}
	if mark != 100 {
		t.Fatalf("fence rt3-victim's mark moved from 100 to %d: the listener client that owns the term table ran SQL as fencegate_owner in its own write's fence check", mark)
	}
}
