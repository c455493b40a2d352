package pgwire_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/pgwire"
)

// TestPanicEndsOneSession: a panic in a session's S2C, with the queue's
// lock held (as the index-out-of-range of 2026-11-29 was), ends that
// session alone: its client is told, its open transaction rolls back,
// another session's writes go on, and the listener still shuts down.
// Without contain the panic ends the process, every client's session
// with it (the test binary dies).
func TestPanicEndsOneSession(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	e.table(t, "contain_t")
	tok, _ := e.lead(t, "contain")
	victim := e.connect(t, "contain", tok)
	other := e.connect(t, "contain", tok)
	if _, err := victim.Exec(t.Context(), "BEGIN"); err != nil {
		t.Fatal(err)
	}
	var armed atomic.Bool
	armed.Store(true)
	e.srv.SetTestHookReply(func(m byte) {
		if m == 'C' && armed.CompareAndSwap(true, false) {
			panic("test: a bug in S2C")
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := victim.Exec(ctx, "INSERT INTO contain_t (v) VALUES ('victim')"); err == nil {
		t.Fatal("the INSERT whose answer S2C panicked on succeeded")
	}
	if _, err := victim.Exec(ctx, "SELECT 1"); err == nil {
		t.Error("the session whose S2C panicked still answers")
	}
	if _, err := other.Exec(ctx, "INSERT INTO contain_t (v) VALUES ('other')"); err != nil {
		t.Fatalf("another session after the panic: %v", err)
	}
	if got := e.values(t, "contain_t"); len(got) != 1 || got[0] != "other" {
		t.Errorf("stored %q, want only the other session's row (the victim's transaction rolled back)", got)
	}
}
