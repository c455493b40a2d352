package pgwire_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/fencegate/fencegate/api/pgwire"
)

// TestTerminateBehindLongStatement: a client that sends a statement that
// runs long (and traps the cancel) and then its Terminate, and keeps its
// connection open: fencegate lets the server run what the client sent
// before it left for leaveGrace only, then ends the backend, as for a
// client gone mid-statement; what the transaction wrote rolls back.
func TestTerminateBehindLongStatement(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	e.table(t, "rt_leave")
	tok, _ := e.lead(t, "rt-leave")
	z := e.raw(t, "rt-leave", tok)
	const trap = "DO $$ DECLARE i int := 0; BEGIN INSERT INTO rt_leave (v) VALUES ('left-behind'); " +
		"LOOP i := i + 1; BEGIN PERFORM pg_sleep(0.05); " +
		"EXCEPTION WHEN query_canceled THEN NULL; END; EXIT WHEN i > 601; END LOOP; END $$"
	z.send(&pgproto3.Query{String: trap}, &pgproto3.Terminate{})
	running := e.running(t, trap)
	if !eventually(running) {
		t.Fatal("the trap never ran")
	}
	if !eventually(func() bool { return !running() }) {
		t.Fatal("the statement of a client that sent its Terminate runs on")
	}
	if got := e.values(t, "rt_leave"); len(got) != 0 {
		t.Errorf("rows of the client that left: %q, want none", got)
	}
}
