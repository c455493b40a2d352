package pgterm_test

import (
	"strings"
	"testing"

	"github.com/fencegate/fencegate/election/pgterm"
	"github.com/fencegate/fencegate/proxy/postgres"
	"github.com/fencegate/fencegate/tokens"
)

// TestRedTeam17LockKeyCollision: two election names with the same
// hashtext share one advisory lock, so a session holding it may be either
// election's leader. With B's leader gone and A's holding the shared key,
// neither the source (Verify, Refresh) nor the backend's check
// (fencegate.advance_term, migration 011) may call B's ended term current;
// nor A's, which the lock cannot tell from B's. The backend's refusal
// names the other election.
func TestRedTeam17LockKeyCollision(t *testing.T) {
	e := rtSetup(t)
	prefix := rtName("rtcoll") + "_"
	var fa, fb string
	if err := e.admin.QueryRow(t.Context(), `
SELECT min(n), max(n) FROM (
  SELECT $1 || i AS n, pg_catalog.hashtext($1 || i) AS h FROM pg_catalog.generate_series(1, 400000) AS i) AS s
 GROUP BY h HAVING count(*) > 1 LIMIT 1`, prefix).Scan(&fa, &fb); err != nil {
		t.Fatalf("no colliding pair found: %v", err)
	}

	// B leads and writes while its row is the only one with the key.
	leaderB, termB := campaign(t, fb, pgterm.DefaultLockKey)
	if termB == 0 {
		t.Fatal("B's campaign lost")
	}
	if r := e.write(t, fb, termB); r != "" {
		t.Fatalf("B's leader's write: refused %s", r)
	}
	_ = leaderB.Close(t.Context())
	e.waitHolders(t, fb, 0)
	// A leads: its lock is B's.
	_, termA := campaign(t, fa, pgterm.DefaultLockKey)
	if termA == 0 {
		t.Fatal("A's campaign lost")
	}

	for _, c := range []struct {
		name, other string
		term        int64
	}{{fb, fa, termB}, {fa, fb, termA}} {
		got, held, err := e.src.Verify(t.Context(), c.name, c.term)
		if err != nil {
			t.Fatal(err)
		}
		if d := tokens.DecideVerified(tokens.Token(c.term), 0, got, held); got.Rev != 0 || d != tokens.Ended {
			t.Errorf("Verify %s/%d sharing its lock key with %s: got %+v, %v; want Rev 0, ended", c.name, c.term, c.other, got, d)
		}
	}
	if err := e.src.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{fa, fb} {
		if got := e.src.Term(name); got.Rev != 0 {
			t.Errorf("after a poll, %s: got %+v, want Rev 0", name, got)
		}
	}

	// B's zombie, straight to the backend's check: refused, nothing stored.
	before := e.stored(t, fb, termB)
	tc, err := postgres.NewTermCheck(e.src.Table(), e.src.LockKey())
	if err != nil {
		t.Fatal(err)
	}
	pg, err := postgres.Open(t.Context(), runtimeDSN, postgres.Config{TermCheck: func(string) (postgres.TermCheck, bool) { return tc, true }})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	_, err = pg.Exec(t.Context(), fb, tokens.Token(termB), []postgres.Statement{
		{SQL: "INSERT INTO rt_writes VALUES ($1, $2)", Params: []any{fb, termB}},
	})
	r, ok := tokens.AsRefusal(err)
	if !ok || r.Reason != tokens.ReasonTermEnded || !strings.Contains(r.Msg, `election "`+fa+`"`) || !strings.Contains(r.Msg, "hashtextextended") {
		t.Errorf("B's zombie through the backend's check: got %v, want TERM_ENDED naming %s and hashtextextended", err, fa)
	}
	if got := e.stored(t, fb, termB); got != before {
		t.Errorf("B's zombie's rows: got %d, want %d", got, before)
	}
	// And through the pipeline, both elections' writes are refused.
	if r := e.write(t, fb, termB); r != tokens.ReasonTermEnded {
		t.Errorf("B's zombie: got %q, want %s", r, tokens.ReasonTermEnded)
	}
	if r := e.write(t, fa, termA); r != tokens.ReasonTermEnded {
		t.Errorf("A's leader, sharing its lock key with B: got %q, want %s", r, tokens.ReasonTermEnded)
	}
}
