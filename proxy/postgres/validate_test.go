package postgres

import "testing"

func TestCheckStatement(t *testing.T) {
	t.Parallel()
	tests := []struct {
		sql     string
		refused bool
	}{
		{"SELECT 1", false},
		{"insert into t values ($1)", false},
		{"WITH x AS (DELETE FROM t RETURNING *) SELECT * FROM x", false},
		{"UPDATE t SET ended = true", false},
		{"SET LOCAL lock_timeout = '1s'", false},
		{"set constraints all deferred", false},
		{"SELECT 'fencegate.fences'", true}, // best effort: a false positive, documented
		{"SELECT * FROM my_fencegate.t", false},
		{"", true},
		{"   \n\t", true},
		{"-- only a comment", true},
		{"/* only /* nested */ comment */", true},
		{"BEGIN", true},
		{"begin isolation level serializable", true},
		{"START TRANSACTION", true},
		{"COMMIT", true},
		{"end", true},
		{"ROLLBACK", true},
		{"abort", true},
		{"SAVEPOINT a", true},
		{"RELEASE SAVEPOINT a", true},
		{"PREPARE TRANSACTION 'x'", true},
		{"PREPARE q AS SELECT 1", true},
		{"CALL do_things()", true},
		{"DO $$ BEGIN COMMIT; END $$", true},
		{"  -- leading comment\n  commit", true},
		{"/* a /* nested */ comment */COMMIT", true},
		{"/* unterminated", true},
		{"SET search_path = evil", true},
		{"SET SESSION statement_timeout = 0", true},
		{"RESET ALL", true},
		{"DISCARD ALL", true},
		{"DEALLOCATE ALL", true},
		{"EXECUTE q", true},
		{"LISTEN x", true},
		{"VACUUM t", true},
		{"COPY t FROM STDIN", true},
		{"DECLARE c CURSOR WITH HOLD FOR SELECT 1", true},
		{"UPDATE fencegate.fences SET token = 0", true},
		{`DELETE FROM "fencegate"."fences"`, true},
		{"select * from FenceGate . fences", true},
	}
	for _, tt := range tests {
		got := checkStatement(tt.sql)
		if (got != "") != tt.refused {
			t.Errorf("checkStatement(%q): got %q, want refused=%v", tt.sql, got, tt.refused)
		}
	}
}
