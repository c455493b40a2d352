package postgres

import (
	"strings"
	"testing"

	"github.com/fencegate/fencegate/tokens"
)

// TestRedTeam10ResultGuardColumnNamedLikeCTE: the result guard weighs
// each row as octet_length(fencegate_head::text). In PostgreSQL a bare
// name in an expression is a column first and a whole-row reference only
// when no column has that name (fencegate_head.* was unambiguous). A
// caller that names one of its result's columns fencegate_head makes the
// guard weigh that column alone: a write returning far more than
// MaxResultBytes commits and is read whole into fencegate.
func TestRedTeam10ResultGuardColumnNamedLikeCTE(t *testing.T) {
	t.Parallel()
	db := admin(t)
	table := unique("rt10_guard")
	mustExec(t, db, "CREATE TABLE "+table+"(n int, pad text)")
	b := openBackend(t, Config{MaxResultRows: 100, MaxResultBytes: 64 << 10})
	for _, tt := range []struct{ name, returning string }{
		{"control", "RETURNING n, pad"},
		{"column named fencegate_head", "RETURNING 1 AS fencegate_head, pad"},
	} {
		res, err := b.Exec(t.Context(), unique("fence"), 1, []Statement{
			{SQL: "INSERT INTO " + table + " SELECT g, repeat('x', 100000) FROM generate_series(1, 10) g " + tt.returning},
		})
		got := count(t, db, table)
		if err == nil {
			size := 0
			for _, row := range res[0].Rows {
				for _, v := range row {
					if s, ok := v.(string); ok {
						size += len(s)
					}
				}
			}
			t.Errorf("%s: a write returning %d bytes (limit 64 KiB) committed (%d rows in the table) and was read whole: the guard weighed the column fencegate_head, not the row", tt.name, size, got)
			mustExec(t, db, "DELETE FROM "+table)
			continue
		}
		r, ok := tokens.AsRefusal(err)
		if !ok || r.Reason != tokens.ReasonInvalidRequest || !strings.Contains(r.Msg, "bytes is over the limit") || got != 0 {
			t.Errorf("%s: got %v, %d rows; want INVALID_REQUEST bytes over the limit, 0 rows", tt.name, err, got)
		}
	}
}
