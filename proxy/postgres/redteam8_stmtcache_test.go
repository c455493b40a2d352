package postgres

import (
	"fmt"
	"testing"
	"time"

	"github.com/fencegate/fencegate/tokens"
)

// TestRedTeam8StatementCacheAfterSchemaChange: a statement fencegate
// prepared on a pooled connection whose result type changes (a column
// added to a table the statement reads with *) fails on the server with
// 0A000 "cached plan must not change result type". pgx drops a cached
// statement whose use failed, so only one call fails; fencegate's own
// cache (connState) keeps it, and every write with that SQL on that
// connection fails until the connection is retired (up to an hour, or
// ten minutes idle). The writes are rolled back and say so (honest), but
// the fence is unusable for that SQL on every connection that had
// prepared it.
func TestRedTeam8StatementCacheAfterSchemaChange(t *testing.T) {
	b := openBackend(t, Config{MaxConns: 1, StatementTimeout: 5 * time.Second})
	db := admin(t)
	tbl := unique("rt8_sc")
	mustExec(t, db, "CREATE TABLE "+tbl+"(id int PRIMARY KEY, v int)")
	fence := unique("rt8_scf")
	stmts := func(id int) []Statement {
		return []Statement{{SQL: "INSERT INTO " + tbl + "(id, v) VALUES ($1, 0) RETURNING *", Params: []any{id}}}
	}
	if _, err := b.Exec(t.Context(), fence, 1, stmts(1)); err != nil {
		t.Fatal(err)
	}
	mustExec(t, db, "ALTER TABLE "+tbl+" ADD COLUMN w int")
	var failed []string
	for id := 2; id <= 5; id++ {
		_, err := b.Exec(t.Context(), fence, 1, stmts(id))
		if err == nil {
			continue
		}
		r, ok := tokens.AsRefusal(err)
		if !ok {
			t.Fatalf("write %d: %v", id, err)
		}
		failed = append(failed, fmt.Sprintf("write %d: %s %v", id, r.Reason, err))
	}
	if len(failed) > 1 {
		t.Errorf("after ALTER TABLE ADD COLUMN, %d of 4 writes with the same SQL failed on the pooled connection, want at most 1 (the cached statement is never dropped):\n%v", len(failed), failed)
	}
	if got := count(t, db, tbl); got < 4 {
		t.Errorf("rows: got %d, want at least 4", got)
	}
}
