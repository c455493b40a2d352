package sqlcheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	pg_query "github.com/pganalyze/pg_query_go/v6"
)

// FuzzCheck holds Check to the parser's own verdict: whatever it accepts
// is one statement of an allowed kind, and a walk of PostgreSQL's JSON
// parse tree, written apart from the checker, finds nothing refused in it.
func FuzzCheck(f *testing.F) {
	for _, a := range attacks {
		f.Add(a.sql)
	}
	f.Add("INSERT INTO jobs (id) VALUES ($1) ON CONFLICT (id) DO UPDATE SET state = excluded.state RETURNING *")
	f.Add("WITH moved AS (DELETE FROM jobs WHERE id = $1 RETURNING *) INSERT INTO done SELECT * FROM moved")
	f.Add("MERGE INTO t USING u ON t.a = u.a WHEN MATCHED THEN UPDATE SET b = u.b WHEN NOT MATCHED THEN INSERT VALUES (u.a, u.b)")
	f.Add("SELECT pg_advisory_xact_lock($1), pg_sleep(0.5), pg_sleep_for('10 ms') FROM t WHERE a IN (SELECT b FROM u) FOR UPDATE")
	f.Add("  SELECT 1; -- c\r")
	c := newChecker(f, Config{MaxSleep: time.Second, CacheBytes: -1})
	f.Fuzz(func(t *testing.T, sql string) {
		st, err := c.Check(sql)
		if err != nil {
			var r *Refusal
			if !errors.As(err, &r) || r.What == "" || r.Why == "" || r.Pos < -1 || r.Pos > len(sql) {
				t.Fatalf("Check(%q): got error %#v, want a *Refusal with What, Why and a Pos in the SQL", sql, err)
			}
			return
		}
		if strings.IndexByte(sql, 0) >= 0 || !utf8.ValidString(sql) {
			t.Fatalf("Check(%q) accepted, but the parser reads a C string and the server only UTF-8", sql)
		}
		tree, err := pg_query.Parse(sql)
		if err != nil || len(tree.Stmts) != 1 {
			t.Fatalf("Check(%q) accepted, but the parser says %v with %d statements", sql, err, len(tree.GetStmts()))
		}
		js, err := pg_query.ParseToJSON(sql)
		if err != nil {
			t.Fatalf("ParseToJSON(%q): %v", sql, err)
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(js), &v); err != nil {
			t.Fatalf("ParseToJSON(%q): %v", sql, err)
		}
		stmts, _ := v["stmts"].([]any)
		top, _ := stmts[0].(map[string]any)["stmt"].(map[string]any)
		for kind := range top {
			if !dmlKeys[kind] {
				t.Fatalf("Check(%q) accepted a top-level %s", sql, kind)
			}
		}
		if problems := audit(v, "", time.Second); len(problems) > 0 {
			t.Fatalf("Check(%q) accepted, but its parse tree has %s\n%s", sql, strings.Join(problems, "; "), js)
		}
		if !strings.Contains(sql, st.Text) || st.Text == "" {
			t.Fatalf("Check(%q): got Text %q, want a non-empty part of the SQL", sql, st.Text)
		}
		again, err := c.Check(st.Text)
		if err != nil || again != st {
			t.Fatalf("Check(%q) = %+v, but Check of its Text = %+v, %v", sql, st, again, err)
		}
		wrapped := "WITH x AS MATERIALIZED (\n" + st.Text + "\n) SELECT * FROM x"
		if tree, err := pg_query.Parse(wrapped); err != nil || len(tree.Stmts) != 1 || tree.Stmts[0].Stmt.GetSelectStmt() == nil {
			t.Fatalf("the Text of %q embedded as %q: got %v, want one SELECT", sql, wrapped, err)
		}
	})
}

var dmlKeys = map[string]bool{"SelectStmt": true, "InsertStmt": true, "UpdateStmt": true, "DeleteStmt": true, "MergeStmt": true}

// Refused functions, written out again for the audit rather than shared
// with the checker.
var (
	auditRefused = map[string]bool{
		"set_config": true, "pg_advisory_lock": true, "pg_advisory_lock_shared": true, "pg_try_advisory_lock": true,
		"pg_try_advisory_lock_shared": true, "pg_advisory_unlock": true, "pg_advisory_unlock_shared": true,
		"pg_advisory_unlock_all": true, "pg_read_file": true, "pg_read_binary_file": true, "pg_stat_file": true,
		"pg_terminate_backend": true, "pg_cancel_backend": true, "pg_reload_conf": true, "pg_rotate_logfile": true,
		"pg_promote": true, "pg_switch_wal": true, "pg_create_restore_point": true, "loread": true, "lowrite": true,
		"query_to_xml": true, "query_to_xmlschema": true, "query_to_xml_and_xmlschema": true, "cursor_to_xml": true,
		"cursor_to_xmlschema": true, "ts_stat": true, "pg_sleep_until": true,
	}
	auditPrefixes = []string{"dblink", "lo_", "pg_ls_", "pg_backup_", "pg_file_"}
	// Lists of plain column names, in the JSON's spelling.
	auditColumnLists = map[string]bool{"colnames": true, "usingClause": true, "aliascolnames": true, "indirection": true}
)

func auditFunc(name string) bool {
	if auditRefused[name] || strings.HasSuffix(name, "_exec") {
		return true
	}
	for _, p := range auditPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

func auditSchema(s string) bool {
	return s == "fencegate" || s == "pg_temp" || strings.HasPrefix(s, "pg_temp_")
}

// svals returns the String values of a JSON list of nodes, "" for others.
func svals(v any) []string {
	l, _ := v.([]any)
	out := make([]string, len(l))
	for i, n := range l {
		if m, ok := n.(map[string]any); ok {
			if s, ok := m["String"].(map[string]any); ok {
				out[i], _ = s["sval"].(string)
			}
		}
	}
	return out
}

// audit walks PostgreSQL's JSON parse tree and lists what a fenced write
// must not hold. key is the key v was found under.
func audit(v any, key string, maxSleep time.Duration) []string {
	var problems []string
	switch x := v.(type) {
	case []any:
		// A list of names: its leading parts must not be a refused schema.
		names := svals(x)
		if len(names) >= 2 && !auditColumnLists[key] && (key != "fields" || len(names) >= 3) {
			for _, s := range names[:len(names)-1] {
				if auditSchema(s) {
					problems = append(problems, fmt.Sprintf("%s in %s %v", s, key, names))
				}
			}
		}
		for _, e := range x {
			problems = append(problems, audit(e, key, maxSleep)...)
		}
	case map[string]any:
		for k, e := range x {
			switch {
			case k[0] >= 'A' && k[0] <= 'Z' && strings.HasSuffix(k, "Stmt") && !dmlKeys[k]: // a node, not a field
				problems = append(problems, "a nested "+k)
			case k == "intoClause":
				problems = append(problems, "an INTO clause")
			case (k == "schemaname" || k == "catalogname") && auditSchema(fmt.Sprint(e)):
				problems = append(problems, fmt.Sprintf("%s %v", k, e))
			case k == "relpersistence" && e == "t":
				problems = append(problems, "a temporary relation")
			case dmlKeys[k] && k != "SelectStmt":
				m, _ := e.(map[string]any)
				rel, _ := m["relation"].(map[string]any)
				if s := fmt.Sprint(rel["schemaname"]); s == "pg_catalog" || rel["relname"] == "pg_settings" {
					problems = append(problems, fmt.Sprintf("a write to %v", rel))
				}
			case k == "FuncCall":
				problems = append(problems, auditCall(e, maxSleep)...)
			case k == "A_Expr" || k == "SubLink" || k == "SortBy":
				m, _ := e.(map[string]any)
				for _, ops := range []any{m["name"], m["operName"], m["useOp"]} {
					if names := svals(ops); len(names) > 2 || len(names) == 2 && names[0] != "pg_catalog" {
						problems = append(problems, fmt.Sprintf("operator %v", names))
					}
				}
			}
			problems = append(problems, audit(e, k, maxSleep)...)
		}
	}
	return problems
}

func auditCall(v any, maxSleep time.Duration) []string {
	m, _ := v.(map[string]any)
	names := svals(m["funcname"])
	if len(names) == 0 {
		return []string{"a call without a name"}
	}
	name := names[len(names)-1]
	switch {
	case auditFunc(name):
		return []string{"a call to " + name}
	case name == "pg_sleep":
		args, _ := m["args"].([]any)
		if len(args) != 1 {
			return []string{"pg_sleep without one argument"}
		}
		c, _ := args[0].(map[string]any)["A_Const"].(map[string]any)
		secs := -1.0
		if iv, ok := c["ival"].(map[string]any); ok {
			n, _ := iv["ival"].(float64) // absent for 0
			secs = n
		} else if fv, ok := c["fval"].(map[string]any); ok {
			secs, _ = strconv.ParseFloat(fmt.Sprint(fv["fval"]), 64)
		} else {
			return []string{"pg_sleep of a non-constant"}
		}
		if secs > maxSleep.Seconds() {
			return []string{fmt.Sprintf("pg_sleep(%v)", secs)}
		}
	case name == "pg_sleep_for":
		args, _ := m["args"].([]any)
		if len(args) != 1 || !strings.Contains(fmt.Sprint(args[0]), "sval") {
			return []string{"pg_sleep_for of a non-constant"}
		}
	}
	return nil
}
