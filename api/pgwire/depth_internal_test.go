package pgwire

import (
	"strings"
	"testing"
)

// TestClassifyRefusesDeep: classify refuses with FG006, in place of
// handing it to pg_query (whose C stack it would overflow: SIGSEGV, the
// process down), a statement that nests too deep, as a Query's string or
// a Parse's; large shallow statements it parses as ever.
func TestClassifyRefusesDeep(t *testing.T) {
	for _, tc := range []struct {
		name   string
		sql    string
		refuse bool
	}{
		{"operator chain", "SELECT " + strings.Repeat("1+", 500000) + "1", true},
		{"casts", "SELECT 1" + strings.Repeat("::int", 100000), true},
		{"joins", "SELECT * FROM t" + strings.Repeat(" JOIN t ON a AND b", 30000), true},
		{"second statement", "BEGIN; SELECT " + strings.Repeat("1+", 100000) + "1; COMMIT", true},
		{"multi-row INSERT", "INSERT INTO t (a, b) VALUES " + strings.TrimSuffix(strings.Repeat("(1, 'a'::text), ", 10000), ", "), false},
		{"IN list", "SELECT * FROM t WHERE a IN (" + strings.TrimSuffix(strings.Repeat("1, ", 100000), ", ") + ")", false},
		{"string literal", "SELECT '" + strings.Repeat("1+", 1<<19) + "'", false},
		{"function body", "CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $$ BEGIN RETURN " + strings.Repeat("1+", 100000) + "1; END $$", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vd := classify(tc.sql)
			if got := vd.refuse == whyDeep; got != tc.refuse {
				t.Fatalf("classify: got refusal %.120q, want the deep nesting refusal %v", vd.refuse, tc.refuse)
			}
			if tc.refuse && !strings.Contains(vd.refuse, "nests deeper than fencegate parses (2000 levels)") {
				t.Errorf("classify: got refusal %q, want it to say how deep fencegate parses", vd.refuse)
			}
		})
	}
}
