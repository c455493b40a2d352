package pgterm_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/tokens"
)

// TestRedTeam13SharedLockRevivesEndedTerm: a term is current "while some
// session holds the election's advisory lock", and both the source
// (pgterm.go, verifySQL/pollSQL) and the in-transaction check
// (fencegate.advance_term) count any granted advisory lock on the key: a
// shared one too. A shared advisory lock confers no leadership (any number
// of sessions hold it at once, and it is what the readers of a
// reader/writer lock on the election's key take while no leader holds the
// exclusive one). Once the leader's session is gone its term is over; a
// session taking the key's lock in share mode must not make that term
// current again for the zombie's writes.
func TestRedTeam13SharedLockRevivesEndedTerm(t *testing.T) {
	e := rtSetup(t)
	fence := rtName("rtshared")
	leader, term := campaign(t, fence, "hashtext")
	if term == 0 {
		t.Fatal("campaign lost")
	}
	if r := e.write(t, fence, term); r != "" {
		t.Fatalf("leader's write: refused %s", r)
	}
	_ = leader.Close(t.Context())
	e.waitHolders(t, fence, 0)
	if r := e.write(t, fence, term); r != tokens.ReasonTermEnded {
		t.Fatalf("zombie's write after its session ended: got %q, want %s", r, tokens.ReasonTermEnded)
	}

	// A reader takes the election key's lock in share mode.
	reader, err := pgx.Connect(t.Context(), server.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reader.Close(context.WithoutCancel(t.Context())) })
	if _, err := reader.Exec(t.Context(), "SELECT pg_advisory_lock_shared(hashtext($1))", fence); err != nil {
		t.Fatal(err)
	}
	before := e.stored(t, fence, term)
	term2, held, err := e.src.Verify(t.Context(), fence, term)
	if err != nil {
		t.Fatal(err)
	}
	r := e.write(t, fence, term)
	if r == "" || e.stored(t, fence, term) != before {
		t.Fatalf("term %d ended with its leader's session; with only a shared advisory lock on the key the source "+
			"reads %+v (held %v, decided %v) and the zombie's write is accepted and stored",
			term, term2, held, tokens.DecideVerified(tokens.Token(term), 0, term2, held))
	}
}
