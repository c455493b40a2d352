package pgwire_test

import (
	"sync"
	"testing"

	"github.com/fencegate/fencegate/api/pgwire"
	"github.com/fencegate/fencegate/proxy/audit"
)

// auditTrail keeps the pipeline's audit records.
type auditTrail struct {
	mu   sync.Mutex
	recs []audit.Record
}

func (a *auditTrail) Write(r *audit.Record) {
	a.mu.Lock()
	a.recs = append(a.recs, *r)
	a.mu.Unlock()
}

func (a *auditTrail) records() []audit.Record {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]audit.Record(nil), a.recs...)
}

// TestAuditRecordsStatements: the audit record of a transaction through
// the listener carries the fingerprint of the statements it ran and the
// rows they wrote, as the gRPC and HTTP paths' records do: an implicit
// transaction, an explicit one whose statements are all counted, one whose
// check ran after the statements that set it up (counted too, in order),
// and an implicit one after them, which counts only its own.
func TestAuditRecordsStatements(t *testing.T) {
	ctx := t.Context()
	var trail auditTrail
	e := newEnvWith(t, pgwire.Config{}, envOptions{audit: &trail})
	e.table(t, "audited")
	tok, _ := e.lead(t, "audited")
	c := e.connect(t, "audited", tok)
	one := "INSERT INTO audited (v) VALUES ('one')"
	if _, err := c.PgConn().Exec(ctx, one).ReadAll(); err != nil {
		t.Fatal(err)
	}
	two := "INSERT INTO audited (v) VALUES ('two'), ('three')"
	for _, sql := range []string{"BEGIN", two, "COMMIT"} {
		if _, err := c.PgConn().Exec(ctx, sql).ReadAll(); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	setup := []string{"BEGIN ISOLATION LEVEL REPEATABLE READ", "SET TRANSACTION READ WRITE", "INSERT INTO audited (v) VALUES ('four')", "COMMIT"}
	for _, sql := range setup {
		if _, err := c.PgConn().Exec(ctx, sql).ReadAll(); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if _, err := c.PgConn().Exec(ctx, one).ReadAll(); err != nil {
		t.Fatal(err)
	}
	var got []audit.Record
	for _, r := range trail.records() {
		if r.Fence == "audited" && r.Outcome == "accepted" {
			got = append(got, r)
		}
	}
	if len(got) != 4 {
		t.Fatalf("got %d accepted records of fence audited (%+v), want 4", len(got), trail.records())
	}
	for i, want := range []struct {
		texts []string
		rows  int64
	}{{[]string{one}, 1}, {[]string{"BEGIN", two, "COMMIT"}, 2}, {setup, 1}, {[]string{one}, 1}} {
		if got[i].Statements != audit.Fingerprint(want.texts...) || got[i].Rows != want.rows {
			t.Errorf("record %d: statements %q, rows %d; want the fingerprint of %q (%s), rows %d",
				i, got[i].Statements, got[i].Rows, want.texts, audit.Fingerprint(want.texts...), want.rows)
		}
	}
}
