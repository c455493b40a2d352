package migrations_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestRedTeam3TermTableOwnerMovesOtherFences: a listener session bound to
// a postgres-term fence runs fencegate.advance_term through
// advance_session, as fencegate_owner (SECURITY DEFINER), and advance_term
// reads the term table (SELECT ... FOR SHARE). A login that owns that
// table (the worker of README's postgres-term pattern writes it, and
// commonly owns it) can put a row level security policy on it whose
// expression calls a SECURITY INVOKER function of its own: the policy runs
// as the querying role, fencegate_owner, which owns fencegate.fences. So a
// client with no fencegate role, through its own session's check, runs
// SQL as fencegate_owner and moves the mark of any fence.
//
// Safe behaviour: the victim fence's mark is unchanged (advance_term
// should read the term table in a way no policy, rule, view or function
// of the table's owner runs as fencegate_owner; or the listener should
// refuse a login that owns, or may become the owner of, the term table).
func TestRedTeam3TermTableOwnerMovesOtherFences(t *testing.T) {
	ctx := t.Context()
	admin, pool := runtimeConn(t) // pool: fencegate's own login
	login := fmt.Sprintf("rt3_termowner_%d", dbSeq.Add(1))
	for _, sql := range []string{
		"CREATE ROLE " + login + " LOGIN",
		"GRANT CREATE ON SCHEMA public TO " + login,
		// The victim: another team's fence, its mark 100.
		"SELECT fencegate.advance('rt3-victim', 100)",
	} {
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	cfg := pool.Config().Copy()
	cfg.User = login
	client, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(context.WithoutCancel(ctx))

	// The worker sets up its term table, as README's postgres-term section
	// says (the GRANT is the table owner's), and its policy.
	for _, sql := range []string{
		"CREATE TABLE public.leadership_term (name text PRIMARY KEY, term bigint NOT NULL)",
		"GRANT SELECT, UPDATE (term) ON public.leadership_term TO fencegate_owner",
		`CREATE FUNCTION public.rt3_evil() RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF current_user = 'fencegate_owner' THEN
        UPDATE fencegate.fences SET token = 1 WHERE name = 'rt3-victim';
    END IF;
    RETURN true;
END $$`,
		"ALTER TABLE public.leadership_term ENABLE ROW LEVEL SECURITY",
		"CREATE POLICY rt3 ON public.leadership_term USING (public.rt3_evil())",
		// Its own election: lock and term 1.
		"INSERT INTO public.leadership_term VALUES ('rt3-mine', 1)",
		"SELECT pg_advisory_lock(hashtext('rt3-mine'))",
	} {
		if _, err := client.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// fencegate binds the session to its own postgres-term fence.
	if _, err := pool.Exec(ctx, "SELECT fencegate.bind_session($1, $2, 'rt3-mine', 'public.leadership_term', 'hashtext')",
		int32(client.PgConn().PID()), login); err != nil {
		t.Fatal(err)
	}
	// Nothing but the check fencegate would run first in every transaction.
	var mark int64
	err = client.QueryRow(ctx, "SELECT fencegate.advance_session($1::pg_catalog.text, $2::pg_catalog.int8)", "rt3-mine", int64(1)).Scan(&mark)
	t.Logf("the client's own check: mark %d, err %v", mark, err)
	if got := redteam2Mark(t, admin, "rt3-victim"); got != 100 {
		t.Fatalf("the victim's mark moved from 100 to %d: the owner of the term table ran SQL as fencegate_owner in its own fence check", got)
	}
}

// TestRedTeam3ClientCannotUnbindOthers (defended): a listener login may
// not end another session's binding (unbind_session is fencegate_runtime's)
// nor read the bindings to find one.
func TestRedTeam3ClientCannotUnbindOthers(t *testing.T) {
	ctx := t.Context()
	admin, pool := runtimeConn(t)
	login := fmt.Sprintf("rt3_unbinder_%d", dbSeq.Add(1))
	if _, err := admin.Exec(ctx, "CREATE ROLE "+login+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	cfg := pool.Config().Copy()
	cfg.User = login
	client, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(context.WithoutCancel(ctx))
	// A victim session, bound by fencegate's pool.
	victimLogin := login + "_victim"
	if _, err := admin.Exec(ctx, "CREATE ROLE "+victimLogin+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	vcfg := pool.Config().Copy()
	vcfg.User = victimLogin
	victim, err := pgx.ConnectConfig(ctx, vcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer victim.Close(context.WithoutCancel(ctx))
	victimPID := int32(victim.PgConn().PID())
	if _, err := pool.Exec(ctx, "SELECT fencegate.bind_session($1, $2, 'v', NULL, NULL)", victimPID, victimLogin); err != nil {
		t.Fatal(err)
	}
	_, err = client.Exec(ctx, "SELECT fencegate.unbind_session($1)", victimPID)
	if err == nil || !strings.Contains(err.Error(), "permission denied for function unbind_session") {
		t.Errorf("unbind of another session by a client: got %v, want permission denied", err)
	}
	_, err = client.Exec(ctx, "SELECT pid FROM fencegate.sessions")
	if err == nil || !strings.Contains(err.Error(), "permission denied for table sessions") {
		t.Errorf("read of the bindings by a client: got %v, want permission denied", err)
	}
	var n int
	if err := admin.QueryRow(ctx, "SELECT count(*) FROM fencegate.sessions WHERE pid = $1", victimPID).Scan(&n); err != nil || n != 1 {
		t.Fatalf("victim's binding: %d rows, %v; want 1", n, err)
	}
}
