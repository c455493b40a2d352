package pgterm_test

import (
	"testing"

	"github.com/fencegate/fencegate/tokens"
)

// TestRowWentBackRefusesTermsHandedOutAgain: once the source sees an
// election's row below a term it read before (deleted and counted
// again), the terms up to that one are refused for whoever holds the
// lock (below the fence's mark STALE_TOKEN, at it TERM_ENDED: the
// high-water rule alone would take it); the first term past them leads
// again, and writes.
func TestRowWentBackRefusesTermsHandedOutAgain(t *testing.T) {
	e := rtSetup(t)
	ctx := t.Context()
	fence := rtName("rtfloor")
	for want := int64(1); want <= 2; want++ {
		conn, z := campaign(t, fence, "hashtext")
		if r := e.write(t, fence, z); z != want || r != "" {
			t.Fatalf("term %d before the reset: refused %q", z, r)
		}
		_ = conn.Close(ctx)
		e.waitHolders(t, fence, 0)
	}
	if _, err := e.admin.Exec(ctx, "DELETE FROM leadership_term WHERE name = $1", fence); err != nil {
		t.Fatal(err)
	}
	for i, want := range []tokens.Reason{tokens.ReasonStaleToken, tokens.ReasonTermEnded, ""} {
		conn, z := campaign(t, fence, "hashtext")
		if z != int64(i+1) {
			t.Fatalf("leader %d after the reset: term %d", i, z)
		}
		if err := e.src.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if got := e.write(t, fence, z); got != want {
			t.Errorf("term %d after the row went back from 2: got %q, want %q", z, got, want)
		}
		_ = conn.Close(ctx)
		e.waitHolders(t, fence, 0)
	}
}
