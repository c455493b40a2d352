package pgterm_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/election/pgterm"
)

// TestFollowsOnlyRowsFound: Term is memory only, and a Verify that finds
// no row leaves nothing behind, so made-up names are never followed; a
// Verify that finds a row follows its election, which a poll then keeps
// fresh, and keeps following after the row is gone.
func TestFollowsOnlyRowsFound(t *testing.T) {
	ctx := t.Context()
	s := open(t, pgterm.Config{Poll: time.Hour})
	junk := rtName("follow-junk")
	for i := range 100 {
		name := fmt.Sprintf("%s-%d", junk, i)
		if got := s.Term(name); got != (election.Term{Election: name}) {
			t.Fatalf("term of made-up %s: got %+v, want zero", name, got)
		}
		if _, held, err := s.Verify(ctx, name, 1); err != nil || held {
			t.Fatalf("verify made-up %s: got held %v, %v; want false, nil", name, held, err)
		}
	}
	if got := s.Terms(); len(got) != 0 {
		t.Fatalf("after asking about 100 names without a row: following %d, want none", len(got))
	}

	name := rtName("follow-real")
	conn, term := campaign(t, name, "hashtext")
	if err := s.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := s.Term(name); got.Last != 0 {
		t.Fatalf("before any Verify of %s: got %+v, want zero (not followed)", name, got)
	}
	if _, held, err := s.Verify(ctx, name, term); err != nil || !held {
		t.Fatalf("verify %s's %d: got held %v, %v; want true, nil", name, term, held, err)
	}
	if got := s.Terms(); len(got) != 1 || got[0].Election != name || got[0].Rev != term {
		t.Fatalf("after Verify found the row: got %+v, want %s at term %d only", got, name, term)
	}
	_ = conn.Close(ctx)
	eventually(t, s, name, func(tm election.Term) bool { return tm.Rev == 0 && tm.Last == term })

	// The row goes: the election stays followed with what was known, so
	// that a row counted again from 1 is seen going back.
	admin, err := pgx.Connect(ctx, server.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close(context.WithoutCancel(ctx)) })
	if _, err := admin.Exec(ctx, "DELETE FROM leadership_term WHERE name = $1", name); err != nil {
		t.Fatal(err)
	}
	if err := s.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := s.Term(name); got.Last != term || got.Rev != 0 {
		t.Errorf("after the row was deleted: got %+v, want Rev 0 Last %d", got, term)
	}
}
