package sqlcheck

import (
	"errors"
	"math"
	"strings"
	"testing"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// nest repeats open n times around mid, then end n times.
func nest(pre, open, mid, end string, n int) string {
	return pre + strings.Repeat(open, n) + mid + strings.Repeat(end, n)
}

// deepShapes build statements that nest one level of the parse tree, or
// more, per repetition, each way measured to overflow pg_query's C stack.
var deepShapes = []struct {
	name              string
	pre, open, mid, c string
}{
	{"operators", "SELECT ", "1+", "1", ""},
	{"concatenation", "SELECT ", "'a'||", "'a'", ""},
	{"custom operators", "SELECT ", "a@>", "b", ""},
	{"prefix operators", "SELECT ", "+-", "a", ""},
	{"prefix operators spaced", "SELECT ", "- ", "a", ""},
	{"NOT", "SELECT ", "NOT ", "true", ""},
	{"casts", "SELECT 1", "::int", "", ""},
	{"COLLATE", "SELECT 'a'", ` COLLATE "C"`, "", ""},
	{"IS NULL", "SELECT 1", " IS NULL", "", ""},
	{"ISNULL", "SELECT 1", " ISNULL", "", ""},
	{"AT TIME ZONE", "SELECT now()", " AT TIME ZONE 'UTC'", "", ""},
	{"json arrows", "SELECT j", "->'a'", "", ""},
	{"OPERATOR", "SELECT 1", " OPERATOR(pg_catalog.+) 1", "", ""},
	{"function calls", "SELECT ", "f(", "1", ")"},
	{"parentheses and operators", "SELECT ", "1+(", "1", ")"},
	{"subselects", "SELECT ", "(SELECT ", "1", ")"},
	{"EXISTS", "SELECT ", "EXISTS (SELECT ", "1", ")"},
	{"IN subselects", "SELECT ", "1 IN (SELECT ", "1", ")"},
	{"CTEs", "", "WITH a AS (", "SELECT 1", ") SELECT 1"},
	{"CTEs with INSERT", "", "WITH a AS (INSERT INTO t ", "SELECT 1", " RETURNING 1) SELECT 1"},
	{"CASE", "SELECT ", "CASE WHEN true THEN ", "1", " END"},
	{"CASE ELSE", "SELECT ", "CASE WHEN true THEN 1 ELSE ", "1", " END"},
	{"arrays", "SELECT ", "ARRAY[", "1", "]"},
	{"nested array literals", "SELECT ARRAY", "[", "1", "]"},
	{"subscripts", "SELECT ", "a[", "1", "]"},
	{"ROW", "SELECT ", "ROW(", "1", ")"},
	{"JSON_OBJECT", "SELECT ", "JSON_OBJECT('a' : ", "1", ")"},
	{"UNION", "", "SELECT 1 UNION ", "SELECT 1", ""},
	{"UNION of lists", "", "SELECT a, b FROM t WHERE x AND y UNION ALL ", "SELECT 1, 2", ""},
	{"INTERSECT", "", "SELECT 1 INTERSECT ", "SELECT 1", ""},
	{"JOIN", "SELECT * FROM t", " JOIN t ON a AND b", "", ""},
	{"CROSS JOIN", "SELECT * FROM t", " CROSS JOIN t", "", ""},
	{"operators around subselects", "SELECT ", "1+(SELECT a, b FROM t WHERE x AND y)+", "1", ""},
	{"operators around a CASE", "SELECT ", "1+CASE WHEN x THEN 1 END+", "1", ""},
	{"IS NULL after BETWEEN", "SELECT a BETWEEN 1 AND 2", " IS NULL", "", ""},
	{"continued E string", "SELECT E'a'\n'\\'' + ", "1+", "1", ""},
	{"comments in operators", "SELECT ", "1+/* ) */", "1", ""},
	{"dollar in names", "SELECT ", "a$b$+", "1", ""},
}

// TestTooDeepRefuses: every way of nesting pg_query deep that was
// measured, past the depth at which a 1 MiB C stack overflows.
func TestTooDeepRefuses(t *testing.T) {
	for _, s := range deepShapes {
		t.Run(s.name, func(t *testing.T) {
			// Each repetition is a level at least: 3,000 overflow 1 MiB.
			for _, n := range []int{3000, 100000} {
				sql := nest(s.pre, s.open, s.mid, s.c, n)
				pos, deep := TooDeep(sql)
				if !deep || pos < 0 || pos >= len(sql) {
					d, _ := depthOf(sql, math.MaxInt)
					t.Errorf("TooDeep of %d repetitions (%d bytes): got %d, %v (estimate %d), want true at a byte of it", n, len(sql), pos, deep, d)
				}
			}
		})
	}
}

// halves are statements whose two halves each nest a little over half
// MaxDepth, and together more: the estimate adds them up.
var halves = []struct {
	name, left, right string
}{
	{"a chain around a subselect", "SELECT " + strings.Repeat("1+", 1100) + "(SELECT " + strings.Repeat("1+", 1100) + "1)", ""},
	{"a chain after a subselect", "SELECT (SELECT " + strings.Repeat("1+", 1100) + "1)", strings.Repeat("+1", 1100)},
	{"a chain after a CASE", "SELECT CASE WHEN x THEN " + strings.Repeat("1+", 1100) + "1 END", strings.Repeat("+1", 1100)},
	{"IS NULL after BETWEEN", "SELECT " + strings.Repeat("1+", 1100) + "1 BETWEEN 1 AND 2", strings.Repeat(" IS NULL", 1100)},
	{"UNION after a list", "SELECT " + strings.Repeat("1+", 1100) + "1, 2 FROM t WHERE x AND y", strings.Repeat(" UNION SELECT 1, 2", 1100)},
	{"JOIN after a condition", "SELECT * FROM t JOIN u ON " + strings.Repeat("1+", 1100) + "1 = 1 AND true", strings.Repeat(" JOIN u ON true", 1100)},
	{"NOT around AND", "SELECT " + strings.Repeat("NOT ", 1100) + "(x AND ", strings.Repeat("1+", 1100) + "1)"},
}

// TestTooDeepAddsUp: what nests inside a group, or before a comma, AND or
// WHEN, is pushed down by what follows it.
func TestTooDeepAddsUp(t *testing.T) {
	for _, h := range halves {
		t.Run(h.name, func(t *testing.T) {
			sql := h.left + h.right
			if _, deep := TooDeep(sql); !deep {
				d, _ := depthOf(sql, math.MaxInt)
				t.Errorf("TooDeep of %.60q...: got false (estimate %d), want true", sql, d)
			}
		})
	}
}

// largeStatements are ordinary statements of a MiB or so, shallow all.
var largeStatements = []struct {
	name string
	sql  string
}{
	{"multi-row INSERT", "INSERT INTO t (a, b, c) VALUES " +
		strings.TrimSuffix(strings.Repeat("(1, 'a'::text, now() - interval '1 day' * 2), ", 10000), ", ")},
	{"IN list", "SELECT * FROM t WHERE a IN (" + strings.TrimSuffix(strings.Repeat("-1, ", 100000), ", ") + ")"},
	{"IN list of casts", "SELECT * FROM t WHERE a IN (" + strings.TrimSuffix(strings.Repeat("'x'::text, ", 100000), ", ") + ")"},
	{"string literal", "INSERT INTO t VALUES ('" + strings.Repeat("1+(", 1<<18) + "')"},
	{"E string literal", "INSERT INTO t VALUES (E'" + strings.Repeat(`\'+(`, 1<<18) + "')"},
	{"continued string literal", "INSERT INTO t VALUES ('a'\n'" + strings.Repeat("+(", 1<<18) + "')"},
	{"quoted identifier", `SELECT 1 AS "` + strings.Repeat("+(", 30) + `" FROM t WHERE ` + strings.Repeat(`"(+" = 1 AND `, 10000) + "true"},
	{"line comments", "SELECT 1 " + strings.Repeat("-- 1+(1+(1+(\n", 50000) + "+ 1"},
	{"line comments ending at CR", "SELECT 1 " + strings.Repeat("-- 1+(1+(1+(\r", 50000) + "+ 1"},
	{"nested comment", "SELECT 1 /* " + strings.Repeat("/* */ 1+(1+(1+( ", 50000) + " */ + 1"},
	{"dollar-quoted body", "CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $body$ BEGIN RETURN " +
		strings.Repeat("1+(", 100000) + "1" + strings.Repeat(")", 100000) + "; END $body$"},
	{"empty dollar tag", "SELECT $$" + strings.Repeat("1+(", 100000) + "$$"},
	{"OR chain", "SELECT * FROM t WHERE " + strings.Repeat("a = 1 OR b <> 'x' AND c >= 2 OR ", 10000) + "true"},
	{"BETWEEN chain", "SELECT * FROM t WHERE " + strings.Repeat("a BETWEEN 1 AND 2 AND ", 10000) + "true"},
	{"CASE of many WHENs", "SELECT CASE a " + strings.Repeat("WHEN 1+1 THEN 'x'||'y' ", 10000) + "ELSE 'z' END FROM t"},
	{"many CASEs", "SELECT " + strings.Repeat("CASE WHEN a > 1 THEN 1 ELSE 2 END AS end, ", 5000) + "1 FROM t"},
	{"wide select list", "SELECT " + strings.TrimSuffix(strings.Repeat("a::int + b::int AS x, ", 20000), ", ") + " FROM t"},
	{"UPDATE SET list", "UPDATE t SET " + strings.TrimSuffix(strings.Repeat("a = a + 1, ", 20000), ", ")},
	{"many statements", strings.Repeat("INSERT INTO t VALUES (1 + 2 * 3) ON CONFLICT DO NOTHING; ", 10000)},
	{"UNION ALL of 1000", strings.Repeat("SELECT a, b FROM t WHERE a = 1 UNION ALL ", 1000) + "SELECT 1, 2"},
	{"jsonb object", "SELECT " + nest("", "jsonb_build_object('k', ", "1", ")", 300)},
	{"names of keywords", "SELECT " + strings.Repeat("t.case, t.end, t.and, ", 20000) + "1 FROM t"},
	{"parameters", "SELECT " + strings.Repeat("$1 || ", 1000) + "$2 FROM t"},
}

// TestTooDeepPasses: large ordinary statements are not refused.
func TestTooDeepPasses(t *testing.T) {
	for _, s := range largeStatements {
		t.Run(s.name, func(t *testing.T) {
			if _, err := pg_query.Parse(s.sql); err != nil {
				t.Fatalf("the statement does not parse: %v", err)
			}
			if pos, deep := TooDeep(s.sql); deep {
				d, _ := depthOf(s.sql, math.MaxInt)
				t.Errorf("TooDeep of %d bytes: got true at byte %d (%.40q), estimate %d, want false", len(s.sql), pos, s.sql[pos:], d)
			}
		})
	}
}

// TestTooDeepBoundsTree holds the estimate to the tree pg_query builds: a
// level of the estimate per two of protobuf's message nesting, which is
// the recursion of libpg_query's output (measured: 1+1+... overflows the
// C stack at the same count as every other shape, per two levels).
func TestTooDeepBoundsTree(t *testing.T) {
	var corpus []string
	for _, s := range deepShapes {
		for _, n := range []int{1, 2, 40} {
			corpus = append(corpus, nest(s.pre, s.open, s.mid, s.c, n))
		}
	}
	for _, s := range largeStatements {
		corpus = append(corpus, s.sql)
	}
	for _, s := range halves {
		corpus = append(corpus, s.left+s.right)
	}
	corpus = append(corpus,
		"SELECT (SELECT 1 ORDER BY (SELECT 1 GROUP BY (SELECT 1)))",
		"SELECT count(*) OVER (ORDER BY (SELECT count(*) OVER (ORDER BY (SELECT 1))))",
		"SELECT (SELECT max(a) FILTER (WHERE a > (SELECT max(a) FILTER (WHERE a > 1))))",
		"WITH a AS (MERGE INTO t USING t s ON true WHEN MATCHED THEN UPDATE SET a = (1) RETURNING 1) SELECT 1",
		"WITH a AS (DELETE FROM t WHERE a IN (SELECT 1) RETURNING 1) SELECT 1",
		"SELECT * FROM ROWS FROM (f((SELECT * FROM ROWS FROM (f((SELECT * FROM t))) s))) s",
		"SELECT * FROM LATERAL (SELECT * FROM LATERAL (SELECT * FROM t) s) s",
		"SELECT (a)[(a)[(a)[1]]]",
		"SELECT xmlelement(name a, xmlelement(name a, 1))",
	)
	for _, sql := range corpus {
		if _, err := pg_query.Parse(sql); err != nil {
			t.Errorf("pg_query.Parse(%.80q): %v", sql, err)
			continue
		}
		checkBoundsTree(t, sql)
	}
}

// FuzzTooDeepBounds holds the estimate to pg_query's tree, as
// TestTooDeepBoundsTree does, for whatever the parser accepts: a
// statement the estimate finds shallower than its tree is one whose depth
// TooDeep could let through to overflow the C stack.
func FuzzTooDeepBounds(f *testing.F) {
	for _, s := range deepShapes {
		f.Add(nest(s.pre, s.open, s.mid, s.c, 3))
	}
	for _, s := range halves {
		f.Add(s.left + s.right)
	}
	f.Add("SELECT CASE WHEN a THEN (b) ELSE c::int END FROM t JOIN u USING (a) WHERE x BETWEEN 1 AND 2 OR NOT y")
	f.Add("WITH a AS (INSERT INTO t VALUES (1) RETURNING 1) SELECT $$x$$, E'\\'' ', \"q\"\"\" FROM a /* /* */ */")
	f.Fuzz(func(t *testing.T, sql string) {
		// Short statements only: a tree deeper than the fuzzer's thread
		// stack takes would kill the run, not fail it.
		if len(sql) > MaxDepth {
			return
		}
		if _, err := pg_query.Parse(sql); err != nil {
			return
		}
		checkBoundsTree(t, sql)
	})
}

// checkBoundsTree fails t if the estimate of sql, which pg_query parses,
// is less than a level per two of the protobuf tree's message nesting.
func checkBoundsTree(t *testing.T, sql string) {
	t.Helper()
	tree, err := pg_query.Parse(sql)
	if err != nil {
		t.Fatalf("pg_query.Parse(%.80q): %v", sql, err)
	}
	levels := messageDepth(tree.ProtoReflect())
	if d, _ := depthOf(sql, math.MaxInt); 2*d < levels {
		t.Errorf("estimate of %.80q: got %d, want %d at least (%d levels of protobuf)", sql, d, (levels+1)/2, levels)
	}
}

// messageDepth is how deep m's messages nest, m included.
func messageDepth(m protoreflect.Message) int {
	deepest := 0
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := range l.Len() {
				deepest = max(deepest, messageDepth(l.Get(i).Message()))
			}
		case fd.Message() != nil && !fd.IsMap():
			deepest = max(deepest, messageDepth(v.Message()))
		}
		return true
	})
	return 1 + deepest
}

// TestCheckRefusesDeep: Check refuses a deep statement with a *Refusal
// (INVALID_REQUEST on the gRPC and HTTP API) in place of handing it to
// pg_query, which would take the process down; cached, so again.
func TestCheckRefusesDeep(t *testing.T) {
	c := newChecker(t, Config{})
	for _, sql := range []string{
		"SELECT " + strings.Repeat("1+", 500000) + "1",
		"SELECT a FROM t " + strings.Repeat("UNION SELECT a FROM t WHERE a > 1 AND b ", 100000),
	} {
		for range 2 {
			_, err := c.Check(sql)
			var r *Refusal
			if !errors.As(err, &r) || r.What != "deep nesting" || !strings.Contains(r.Why, "nests deeper than fencegate parses") || r.Pos < 0 || r.Pos >= len(sql) {
				t.Fatalf("Check(%.40q...): got %v, want a deep nesting *Refusal at a byte of it", sql, err)
			}
		}
	}
	st, err := c.Check(largeStatements[0].sql)
	if err != nil || st.Kind != "INSERT" {
		t.Fatalf("Check of a 10,000-row INSERT: got %+v, %v, want an INSERT", st.Kind, err)
	}
}

// TestTooDeepShortAllocs: statements too short to reach MaxDepth are not
// scanned, and cost nothing.
func TestTooDeepShortAllocs(t *testing.T) {
	sql := strings.Repeat("(", MaxDepth)
	if allocs := testing.AllocsPerRun(100, func() { TooDeep(sql) }); allocs != 0 {
		t.Errorf("TooDeep of %d bytes: got %v allocations, want 0", len(sql), allocs)
	}
	if _, deep := TooDeep(sql); deep {
		t.Errorf("TooDeep of %d bytes: got true, want false (too short to scan)", len(sql))
	}
}

func BenchmarkTooDeep(b *testing.B) {
	for _, bm := range []struct {
		name string
		sql  string
	}{
		{"short", benchInsert},
		{"insert_1MiB", largeStatements[0].sql},
	} {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bm.sql)))
			for b.Loop() {
				TooDeep(bm.sql)
			}
		})
	}
}
