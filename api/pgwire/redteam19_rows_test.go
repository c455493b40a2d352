package pgwire_test

import (
	"io"
	"testing"

	"github.com/fencegate/fencegate/api/pgwire"
)

// TestRedTeam19AuditRowsCountWhatWasNotWritten: SECURITY.md documents the
// audit record's rows_affected as "rows the statements changed", and a
// record through the listener as carrying "its rows" only for a
// transaction that committed. session.countRows adds the number of every
// CommandComplete tag of the client's that starts with I, U, D, M or C:
// rows a ROLLBACK TO SAVEPOINT undid are counted (the transaction then
// commits), as are the rows COPY ... TO STDOUT only read ("COPY n") and
// the rows MOVE skipped in a cursor ("MOVE n", taken for MERGE).
//
// Attack: three committed transactions through the listener, each
// writing at most what the table shows: BEGIN; INSERT 2 rows; SAVEPOINT;
// INSERT 5 rows; ROLLBACK TO SAVEPOINT; COMMIT — COPY (SELECT 6 rows) TO
// STDOUT — BEGIN; DECLARE a cursor; MOVE 7 in it; COMMIT.
//
// What happens: the three records say rows_affected 7, 6 and 7 (the
// table holds the 2 rows kept).
//
// Expected: each record's rows_affected is the rows its transaction
// changed in the database: 2, 0 and 0.
func TestRedTeam19AuditRowsCountWhatWasNotWritten(t *testing.T) {
	ctx := t.Context()
	var trail auditTrail
	e := newEnvWith(t, pgwire.Config{}, envOptions{audit: &trail})
	e.table(t, "rt19_rows")
	cases := []struct {
		fence, sql string
		copyOut    bool
		want       int64
	}{
		{"rt19-rows-sp", "BEGIN; INSERT INTO rt19_rows (v) SELECT 'kept' FROM generate_series(1, 2); SAVEPOINT s; " +
			"INSERT INTO rt19_rows (v) SELECT 'undone' FROM generate_series(1, 5); ROLLBACK TO SAVEPOINT s; COMMIT", false, 2},
		{"rt19-rows-copy", "COPY (SELECT generate_series(1, 6)) TO STDOUT", true, 0},
		{"rt19-rows-move", "BEGIN; DECLARE c CURSOR FOR SELECT generate_series(1, 7); MOVE 7 IN c; COMMIT", false, 0},
	}
	for _, tc := range cases {
		tok, _ := e.lead(t, tc.fence)
		c := e.connect(t, tc.fence, tok)
		var err error
		if tc.copyOut {
			_, err = c.PgConn().CopyTo(ctx, io.Discard, tc.sql)
		} else {
			_, err = c.PgConn().Exec(ctx, tc.sql).ReadAll()
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.sql, err)
		}
	}
	if n := e.count(t, "rt19_rows"); n != 2 {
		t.Fatalf("table holds %d rows, want 2", n)
	}
	for _, tc := range cases {
		found := false
		for _, r := range trail.records() {
			if r.Fence != tc.fence || r.Outcome != "accepted" {
				continue
			}
			found = true
			if r.Rows != tc.want || r.RolledBack {
				t.Errorf("audit record %s of %.60q: rows_affected %d, rolled_back %v; want %d rows changed, committed",
					r.RequestID, tc.sql, r.Rows, r.RolledBack, tc.want)
			}
		}
		if !found {
			t.Errorf("no accepted audit record for fence %s", tc.fence)
		}
	}
}
