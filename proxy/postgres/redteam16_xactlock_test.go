package postgres

import (
	"testing"
	"time"

	"github.com/fencegate/fencegate/tokens"
)

// TestRedTeam16XactAdvisoryLockRevivesEndedTerm: a postgres-term fence's
// term is current while "a granted advisory lock in mode ExclusiveLock
// (pg_advisory_lock, pg_try_advisory_lock and their xact forms)" is held
// on the election's key (migration 010). The SQL check refuses only the
// session-level forms (sqlcheck/funcs.go refusedFuncs), so any caller with
// a valid token for a fence of its own (tokens are not secrets: anyone may
// campaign in an election of their own) can send, through the gRPC/HTTP
// path, SELECT pg_advisory_xact_lock(hashtext('<victim>')) and a sleep
// within the write time limit. For as long as that write runs, the
// victim's ended term is current again for fencegate.advance_term, and a
// zombie of the victim fence, whose leader's session is gone, has its
// write accepted and stored (and the real next leader cannot take the
// lock: the election is held leaderless). Safe outcome: the zombie's write
// is refused TERM_ENDED whatever other fenced writes hold.
func TestRedTeam16XactAdvisoryLockRevivesEndedTerm(t *testing.T) {
	b := openTermBackend(t)
	victim := unique("term_f")
	old, term := seedWorker(t, victim)
	if term == 0 {
		t.Fatal("campaign lost")
	}
	if err := termWrite(t, b, victim, term); err != nil {
		t.Fatalf("leader's write: %v", err)
	}
	_ = old.Close(t.Context())
	waitUnlocked(t, victim)
	before := writesOf(t)
	wantRefusal(t, termWrite(t, b, victim, term), tokens.ReasonTermEnded, "is over")

	// The attacker: a valid leader of a fence of its own (an ordinary,
	// advance-checked fence), through the same pipeline as any gRPC write.
	attack := make(chan error, 1)
	go func() {
		_, err := b.Exec(t.Context(), unique("rt16_attacker"), 1, []Statement{
			{SQL: "SELECT pg_advisory_xact_lock(hashtext($1))", Params: []any{victim}},
			{SQL: "SELECT pg_sleep(2)"},
		})
		attack <- err
	}()
	db := admin(t)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var n int
		if err := db.QueryRow(t.Context(), `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND mode = 'ExclusiveLock'
AND classid = ((hashtext($1)::bigint >> 32) & 4294967295)::oid AND objid = (hashtext($1)::bigint & 4294967295)::oid`, victim).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the attacker's write never took the lock")
		}
	}
	// The real next leader cannot campaign meanwhile.
	_, nextTerm := seedWorker(t, victim)
	zombieErr := termWrite(t, b, victim, term)
	if err := <-attack; err != nil {
		t.Fatalf("attacker's write was refused: %v", err)
	}
	after := writesOf(t)
	if nextTerm == 0 {
		t.Logf("the next leader lost its campaign while the attacker's write held the election's key")
	}
	if zombieErr == nil || after != before {
		t.Fatalf("zombie of ended term %d: got err=%v, rows %d -> %d; want TERM_ENDED and nothing stored "+
			"(an exclusive xact advisory lock taken by another fence's fenced write made the ended term current)",
			term, zombieErr, before, after)
	}
	wantRefusal(t, zombieErr, tokens.ReasonTermEnded, "is over")
}
