package postgres

import (
	"testing"

	"github.com/fencegate/fencegate/tokens"
)

// TestRedTeam17HashtextLockCollisionKeepsEndedTermAlive: a postgres-term
// fence's term is "current" in fencegate.advance_term when *some* session
// holds the advisory lock whose key is hashtext(fence) — the default lock
// key derivation (pgterm.DefaultLockKey). hashtext is a 32-bit hash, so
// two valid fence names that collide are found in a second (about 2^16
// names by the birthday bound), and the pg_locks probe cannot tell the
// lock of election A from the lock of election B: per-fence state leaks
// across fences.
//
// Attack: B's leader wins lock hashtext(B), raises B's term row to T and
// goes away (its session ends: B's term T is over). A's leader then takes
// lock hashtext(A) == hashtext(B). B's zombie writes with token T: the
// term row still says T and "some session holds the lock", so the write
// is applied although B's term ended and no leader of B exists. This is
// the backend's atomic check itself (the only check that runs in the
// transaction), so nothing else catches it.
//
// Expected: TERM_ENDED (FG002), nothing written.
func TestRedTeam17HashtextLockCollisionKeepsEndedTermAlive(t *testing.T) {
	b := openTermBackend(t)
	conn := admin(t)
	// Two fence names (both routed to postgres-term by the test backend:
	// prefix term_) with the same hashtext.
	var fa, fb string
	err := conn.QueryRow(t.Context(), `
SELECT min(n), max(n) FROM (
  SELECT 'term_rt17c_' || i AS n, pg_catalog.hashtext('term_rt17c_' || i) AS h
    FROM pg_catalog.generate_series(1, 400000) AS i) AS s
 GROUP BY h HAVING count(*) > 1 LIMIT 1`).Scan(&fa, &fb)
	if err != nil {
		t.Fatalf("no colliding pair found: %v", err)
	}
	t.Logf("hashtext(%q) == hashtext(%q)", fa, fb)

	// B's leader: wins its lock, raises its term, then its session ends.
	connB, termB := seedWorker(t, fb)
	if termB == 0 {
		t.Fatalf("B's leader did not win the lock")
	}
	if err := termWrite(t, b, fb, termB); err != nil {
		t.Fatalf("B's leader's own write refused: %v", err)
	}
	_ = connB.Close(t.Context()) // B's term is over
	// A's leader takes lock hashtext(A), the same key.
	_, termA := seedWorker(t, fa)
	if termA == 0 {
		t.Fatalf("A's leader did not win the lock")
	}
	before := writesOf(t)
	err = termWrite(t, b, fb, termB)
	if err == nil {
		t.Fatalf("zombie of %s with ended term %d was applied (%d rows before, %d after): the lock of %s, a different election whose name collides under hashtext, kept it current",
			fb, termB, before, writesOf(t), fa)
	}
	r, ok := tokens.AsRefusal(err)
	if !ok || r.Reason != tokens.ReasonTermEnded {
		t.Fatalf("got %v, want TERM_ENDED", err)
	}
}
