package pgwire_test

import (
	"testing"

	"github.com/fencegate/fencegate/api/pgwire"
)

// TestRedTeam17RolledBackTransactionAuditedAccepted: proxy.Admission.Done
// is documented as "nil when it committed with the fence check, else a
// *tokens.RefusalError (the fence check refused, or a statement failed)".
// The listener calls Done(nil, …) whenever a transaction ends (the server
// is idle again, or a COMMIT tag), whatever became of it: a transaction
// the client rolled back, or an implicit one whose statement failed, is
// counted fencegate_requests_total{outcome="accepted"}, audited
// Outcome "accepted" with the rows it "wrote" and a raised
// HighWaterAfter, and folded into the tracker as an applied write. The
// same failure over HTTP/gRPC is STATEMENT_FAILED. The audit trail then
// records writes that never happened.
//
// Attack: BEGIN; INSERT (1 row); ROLLBACK — and an implicit transaction
// "INSERT …; SELECT 1/0" that PostgreSQL rolls back. Nothing is written.
//
// Expected: no audit record of the fence claims "accepted" with rows for
// these transactions (the table stays empty): a rolled-back transaction
// is not an accepted write.
func TestRedTeam17RolledBackTransactionAuditedAccepted(t *testing.T) {
	ctx := t.Context()
	var trail auditTrail
	e := newEnvWith(t, pgwire.Config{}, envOptions{audit: &trail})
	e.table(t, "rt17rollback")
	tok, _ := e.lead(t, "rt17rollback")
	c := e.connect(t, "rt17rollback", tok)
	for _, sql := range []string{"BEGIN", "INSERT INTO rt17rollback (v) VALUES ('never')", "ROLLBACK"} {
		if _, err := c.PgConn().Exec(ctx, sql).ReadAll(); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if _, err := c.PgConn().Exec(ctx, "INSERT INTO rt17rollback (v) VALUES ('never'); SELECT 1/0").ReadAll(); err == nil {
		t.Fatal("SELECT 1/0 did not fail")
	}
	var n int
	if err := e.admin.QueryRow(ctx, "SELECT count(*) FROM rt17rollback").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("table holds %d rows, want 0", n)
	}
	for _, r := range trail.records() {
		if r.Fence == "rt17rollback" && r.Outcome == "accepted" && r.Rows > 0 {
			t.Errorf("audit record %s says outcome %q, rows %d, high-water %d -> %d, for a transaction that was rolled back (table holds 0 rows)",
				r.RequestID, r.Outcome, r.Rows, r.HighWaterBefore, r.HighWaterAfter)
		}
	}
}
