package pgwire_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/api/pgwire"
	"github.com/fencegate/fencegate/proxy/audit"
)

// TestTransactionOutcomeAudited: a transaction through the listener is
// audited as what the server said became of it: accepted (its rows, the
// mark raised to its token) only when it committed, that is when it ended
// with COMMIT's answer "COMMIT" or, implicit, reached ReadyForQuery 'I'
// with no error; STATEMENT_FAILED with no rows and the mark unchanged when
// a statement failed it; accepted with rolled_back set, no rows and the
// mark unchanged when its client rolled it back or abandoned it (nothing
// refused it, nothing was applied).
func TestTransactionOutcomeAudited(t *testing.T) {
	ctx := t.Context()
	var trail auditTrail
	e := newEnvWith(t, pgwire.Config{}, envOptions{audit: &trail})
	e.table(t, "outcomes")
	for _, sql := range []string{
		"DROP TABLE IF EXISTS outcomes_deferred",
		"CREATE TABLE outcomes_deferred (v text UNIQUE DEFERRABLE INITIALLY DEFERRED)",
		"GRANT INSERT ON outcomes_deferred TO worker",
	} {
		if _, err := e.admin.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	tok, _ := e.lead(t, "outcomes")
	c := e.connect(t, "outcomes", tok)
	// pgx prepares a statement (Parse, Describe, Sync) before its first
	// use: a transaction of its own, fenced (the check goes in front of
	// the Parse) and audited. Prepared here, each case below is the one
	// transaction it runs.
	for _, sql := range []string{"INSERT INTO outcomes (v) VALUES ($1)", "SELECT 1/$1::int"} {
		if _, err := c.Prepare(ctx, sql, sql); err != nil {
			t.Fatal(err)
		}
	}
	simple := func(sqls ...string) func(t *testing.T) {
		return func(t *testing.T) {
			t.Helper()
			for _, sql := range sqls {
				_, _ = c.PgConn().Exec(ctx, sql).ReadAll() // some fail on purpose
			}
		}
	}
	// Parse, Bind, Describe, Execute, Sync for each.
	extended := func(sqls ...string) func(t *testing.T) {
		return func(t *testing.T) {
			t.Helper()
			for _, sql := range sqls {
				_ = c.PgConn().ExecParams(ctx, sql, nil, nil, nil, nil).Read().Err
			}
		}
	}
	const insert = "INSERT INTO outcomes (v) VALUES ('x')"
	for _, tc := range []struct {
		name    string
		run     func(t *testing.T)
		outcome string
		rows    int64
	}{
		{"implicit", simple(insert), "accepted", 1},
		{"explicit commit", simple("BEGIN", insert, "COMMIT"), "accepted", 1},
		{"explicit rollback", simple("BEGIN", insert, "ROLLBACK"), "rolled back", 0},
		{"implicit, a statement fails", simple(insert + "; SELECT 1/0"), "STATEMENT_FAILED", 0},
		{"one string, rolled back", simple("BEGIN; " + insert + "; ROLLBACK"), "rolled back", 0},
		{"commit of a failed block (answered ROLLBACK)", simple("BEGIN", insert, "SELECT 1/0", "COMMIT"), "STATEMENT_FAILED", 0},
		{"failure undone by a savepoint, committed", simple("BEGIN", insert, "SAVEPOINT s", "SELECT 1/0", "ROLLBACK TO SAVEPOINT s", "COMMIT"), "accepted", 1},
		{"rolled back to a savepoint, then rolled back", simple("BEGIN", "SAVEPOINT s", insert, "ROLLBACK TO SAVEPOINT s", insert, "ROLLBACK"), "rolled back", 0},
		{"a deferred constraint fails the commit", simple("BEGIN", insert, "INSERT INTO outcomes_deferred VALUES ('a'), ('a')", "COMMIT"), "STATEMENT_FAILED", 0},
		{"extended, implicit", func(t *testing.T) {
			t.Helper()
			if _, err := c.Exec(ctx, "INSERT INTO outcomes (v) VALUES ($1)", "y"); err != nil {
				t.Fatal(err)
			}
		}, "accepted", 1},
		{"extended batch, a statement fails", func(t *testing.T) {
			t.Helper()
			b := &pgx.Batch{}
			b.Queue("INSERT INTO outcomes (v) VALUES ($1)", "y")
			b.Queue("SELECT 1/$1::int", 0)
			if err := c.SendBatch(ctx, b).Close(); err == nil {
				t.Fatal("1/0 did not fail")
			}
		}, "STATEMENT_FAILED", 0},
		{"extended, rolled back", extended("BEGIN", insert, "ROLLBACK"), "rolled back", 0},
		{"extended, commit of a failed block", extended("BEGIN", insert, "SELECT 1/0", "COMMIT"), "STATEMENT_FAILED", 0},
		{"extended, committed", extended("BEGIN", insert, "COMMIT"), "accepted", 1},
		{"abandoned: the client closes its connection", func(t *testing.T) {
			t.Helper()
			c2 := e.connect(t, "outcomes", tok)
			simple := func(sql string) {
				if _, err := c2.PgConn().Exec(ctx, sql).ReadAll(); err != nil {
					t.Fatalf("%s: %v", sql, err)
				}
			}
			simple("BEGIN")
			simple(insert)
			if err := c2.Close(ctx); err != nil {
				t.Fatal(err)
			}
		}, "rolled back", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(outcomeRecords(&trail))
			tc.run(t)
			var got []audit.Record
			// Done comes before the answer, except for an abandoned
			// transaction, which ends with its session.
			for deadline := time.Now().Add(5 * time.Second); ; {
				got = outcomeRecords(&trail)[before:]
				if len(got) > 0 || time.Now().After(deadline) || ctx.Err() != nil {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if len(got) != 1 {
				t.Fatalf("got %d audit records (%+v), want 1", len(got), got)
			}
			r := got[0]
			// A transaction its client rolled back was accepted (nothing
			// refused it) and applied nothing.
			want, rolledBack := tc.outcome, tc.outcome == "rolled back"
			if rolledBack {
				want = "accepted"
			}
			if r.Outcome != want || r.RolledBack != rolledBack || r.Rows != tc.rows {
				t.Errorf("got outcome %q, rolled_back %v, rows %d; want %q, rolled_back %v, rows %d",
					r.Outcome, r.RolledBack, r.Rows, want, rolledBack, tc.rows)
			}
			if applied := tc.outcome == "accepted"; applied && r.HighWaterAfter != tok || !applied && r.HighWaterAfter != r.HighWaterBefore {
				t.Errorf("got high-water %d -> %d for outcome %q (token %d)", r.HighWaterBefore, r.HighWaterAfter, tc.outcome, tok)
			}
		})
	}
	if n, want := e.count(t, "outcomes"), 5; n != want {
		t.Errorf("table holds %d rows, want %d (one per accepted transaction)", n, want)
	}
}

// outcomeRecords are the trail's records of fence outcomes.
func outcomeRecords(trail *auditTrail) []audit.Record {
	var recs []audit.Record
	for _, r := range trail.records() {
		if r.Fence == "outcomes" {
			recs = append(recs, r)
		}
	}
	return recs
}
