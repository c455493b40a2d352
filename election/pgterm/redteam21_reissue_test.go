package pgterm_test

import (
	"testing"

	"github.com/fencegate/fencegate/election"
)

// TestRedTeam21RowResetReissuesTerm: TestRedTeamPgTermRowReset showed
// that, right after the term row is deleted and counted again from 1,
// the old leader's higher token is refused. It stops there. Leaders keep
// coming, the row climbs back, and the token of before the reset is
// handed out a second time: a new leader d holds the lock with term 3,
// the number the zombie a held before the reset. From then on a's
// writes pass both the source (memory: term 3 current) and the backend's
// in-transaction check (row 3, lock held exclusively, by d), and the
// high-water rule lets both through (3 >= 3): two writers in one term.
//
// fencegate saw the rewind happen: a poll read the row at 1 after it had
// read 3, and the source keeps Last at 3 (store: Last = max), yet Verify
// and the check call 3 current again once the row says so. The etcd
// watcher, facing the same reuse of numbers (etcd restored without
// --bump-revision), refuses every term up to the highest seen before the
// rewind (Watcher.floor). Expected: a term number the source has seen
// handed out before the row went backwards is not accepted again (refused
// TERM_ENDED or UNKNOWN_TERM) — for d as well, which campaigns past it.
// Severity: high (split brain after a row reset: DELETE by an operator,
// a restore of the table, or a worker's UPDATE that lowers the term).
func TestRedTeam21RowResetReissuesTerm(t *testing.T) {
	e := rtSetup(t)
	ctx := t.Context()
	fence := rtName("rt21reissue")
	if _, err := e.admin.Exec(ctx, "INSERT INTO leadership_term VALUES ($1, 2)", fence); err != nil {
		t.Fatal(err)
	}
	a, za := campaign(t, fence, "hashtext")
	if za != 3 {
		t.Fatalf("a's term: got %d, want 3", za)
	}
	if r := e.write(t, fence, za); r != "" {
		t.Fatalf("a's write: refused %s", r)
	}
	// a's session is gone (killed, its host partitioned); the process
	// itself is paused and still believes it leads with term 3.
	_ = a.Close(ctx)
	e.waitHolders(t, fence, 0)

	// The row is reset, and the source sees it: every poll reads it.
	if _, err := e.admin.Exec(ctx, "DELETE FROM leadership_term WHERE name = $1", fence); err != nil {
		t.Fatal(err)
	}
	var seen []election.Term
	for _, id := range []string{"b", "c"} {
		conn, z := campaign(t, fence, "hashtext")
		if z == 0 || z >= za {
			t.Fatalf("%s: term %d, want a row counted again from 1", id, z)
		}
		if err := e.src.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		seen = append(seen, e.src.Term(fence))
		_ = conn.Close(ctx)
		e.waitHolders(t, fence, 0)
	}
	_, zd := campaign(t, fence, "hashtext")
	if zd != za {
		t.Fatalf("d's term: got %d, want %d", zd, za)
	}
	if err := e.src.Refresh(ctx); err != nil {
		t.Fatal(err)
	}

	rd := e.write(t, fence, zd)
	before := e.stored(t, fence, za)
	ra := e.write(t, fence, za)
	if ra == "" || e.stored(t, fence, za) != before {
		t.Errorf("term %d handed out twice (a before the row reset, d after; the source read %+v in between): "+
			"the zombie a's write is accepted and stored (d's write: %q); memory now %+v",
			za, seen, rd, e.src.Term(fence))
	}
}
