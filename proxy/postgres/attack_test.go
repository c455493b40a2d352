package postgres

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/tokens"
)

// The tests here attack the pipeline with SQL the SQL check would refuse,
// to show what the pipeline's own defences do when the check misses.

// TestSmuggledTransactionIsNotAcknowledged: a statement that opens a
// transaction block (a comment ended by CR hides BEGIN from a filter that
// ends comments at LF) in a coalesced batch. The writes that follow on the
// connection join that block and commit only if something commits it. No
// write may be acknowledged that is not committed.
func TestSmuggledTransactionIsNotAcknowledged(t *testing.T) {
	t.Parallel()
	b := openBackend(t, Config{MaxConns: 1})
	b.uncheckedSQL = true
	db := admin(t)
	table := unique("smuggled")
	mustExec(t, db, "CREATE TABLE "+table+"(n int PRIMARY KEY)")
	insert := func(n int) Statement {
		return Statement{SQL: "INSERT INTO " + table + "(n) VALUES ($1)", Params: []any{float64(n)}}
	}

	const writes = 12
	busy := occupy(t, b, 1, 300*time.Millisecond)
	errs := make([]error, writes)
	var wg sync.WaitGroup
	for i := range writes {
		stmts := []Statement{insert(i)}
		if i == 3 {
			stmts = append(stmts, Statement{SQL: "-- x\rBEGIN\nWORK"})
		}
		wg.Go(func() { _, errs[i] = b.Exec(t.Context(), unique("fence"), 1, stmts) })
		time.Sleep(5 * time.Millisecond) // in order, into one batch
	}
	wg.Wait()
	busy.Wait()

	stored := map[int]bool{}
	rows, err := db.Query(t.Context(), "SELECT n FROM "+table)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n int
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		stored[n] = true
	}
	var acked int
	for i, err := range errs {
		if err == nil {
			acked++
			if !stored[i] {
				t.Errorf("write %d: acknowledged, but its row was not committed", i)
			}
			continue
		}
		r, ok := tokens.AsRefusal(err)
		if !ok {
			t.Fatalf("write %d: got %v, want a refusal", i, err)
		}
		if stored[i] && r.Metadata["outcome"] != "unknown" {
			t.Errorf("write %d: refused with %v as not applied, but its row was committed", i, err)
		}
	}
	if acked == writes {
		t.Errorf("every write acknowledged: the smuggled BEGIN went unnoticed")
	}
	// The connection with the open block was not reused.
	if _, err := b.Exec(t.Context(), unique("fence"), 1, []Statement{insert(100)}); err != nil {
		t.Fatalf("write after the batch: %v", err)
	}
	var n int
	if err := db.QueryRow(t.Context(), "SELECT count(*) FROM "+table+" WHERE n = 100").Scan(&n); err != nil || n != 1 {
		t.Errorf("write after the batch: committed rows got %d (%v), want 1", n, err)
	}
}

// TestSessionSettingsDoNotLeak: a write that changes a setting of the
// pooled session beyond its transaction does not change it for the next
// caller on the same connection.
func TestSessionSettingsDoNotLeak(t *testing.T) {
	t.Parallel()
	b := openBackend(t, Config{MaxConns: 1})
	b.uncheckedSQL = true
	db := admin(t)
	table := unique("readonly")
	mustExec(t, db, "CREATE TABLE "+table+"(n int)")
	if _, err := b.Exec(t.Context(), unique("fence"), 1, []Statement{
		{SQL: "SELECT set_config('default_transaction_read_only', 'on', false)"},
	}); err != nil {
		t.Fatalf("attack write: %v", err)
	}
	if _, err := b.Exec(t.Context(), unique("fence"), 1, []Statement{
		{SQL: "INSERT INTO " + table + " VALUES (1)"},
	}); err != nil {
		t.Fatalf("next caller's write: got %v, want nil (the session's read-only default must not outlive the attack)", err)
	}
}

// TestWriteTimeLimit: the write's time limit bounds all of its statements
// together, not each one: three sleeps each well within statement_timeout
// add up past the write's limit, and the write rolls back.
func TestWriteTimeLimit(t *testing.T) {
	t.Parallel()
	b := openBackend(t, Config{MaxConns: 1, StatementTimeout: 5 * time.Second, WriteTimeout: 500 * time.Millisecond})
	db := admin(t)
	table := unique("slow")
	mustExec(t, db, "CREATE TABLE "+table+"(n int)")
	sleep := Statement{SQL: "SELECT pg_sleep(0.3)"}
	start := time.Now()
	_, err := b.Exec(t.Context(), unique("fence"), 1, []Statement{
		{SQL: "INSERT INTO " + table + " VALUES (1)"}, sleep, sleep, sleep,
	})
	elapsed := time.Since(start)
	r := refusal(t, err, tokens.ReasonBackendUnavailable)
	if _, unknown := r.Metadata["outcome"]; unknown || !strings.Contains(r.Msg, "time limit") {
		t.Errorf("refusal: got %v (metadata %v), want the time limit named and a known outcome", err, r.Metadata)
	}
	if elapsed > 4*time.Second {
		t.Errorf("refused after %v, want about the 500ms limit", elapsed)
	}
	if got := count(t, db, table); got != 0 {
		t.Errorf("rows: got %d, want 0", got)
	}
	if _, err := b.Exec(t.Context(), unique("fence"), 1, []Statement{sleep}); err != nil {
		t.Errorf("a write within the limit: %v", err)
	}
}
