package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestNewSQLCheckResult(t *testing.T) {
	st := sqlStatement{"insert", insertSQL}
	tests := []struct {
		old, cached, uncached, writeUs float64
		wantCachedX, wantUncachedX     float64
		wantCachedPct, wantUncachedPct float64
	}{
		{100, 40, 20100, 400, 0.4, 201, -0.015, 5},
		{100, 40, 24100, 400, 0.4, 241, -0.015, 6},
		{80, 200, 8080, 100, 2.5, 101, 0.12, 8},
		{0, 40, 900, 0, 0, 0, 0, 0}, // nothing to divide by: zeros, not Inf
	}
	for _, tt := range tests {
		f := newSQLCheckResult(st, tt.old, tt.cached, tt.uncached, tt.writeUs, "here", 3).SQLCheck
		got := [4]float64{f.CachedOverOld, f.UncachedOverOld, f.CachedAddedPct, f.UncachedAddedPct}
		want := [4]float64{tt.wantCachedX, tt.wantUncachedX, tt.wantCachedPct, tt.wantUncachedPct}
		if got != want {
			t.Errorf("old %v, cached %v, uncached %v, write %v µs: got ×old %v/%v, added %v/%v %%; want %v/%v, %v/%v %%",
				tt.old, tt.cached, tt.uncached, tt.writeUs, got[0], got[1], got[2], got[3], want[0], want[1], want[2], want[3])
		}
	}
}

func TestSQLCheckReport(t *testing.T) {
	cfg, err := parseConfig([]string{"--quick"})
	if err != nil {
		t.Fatal(err)
	}
	r := newReport(cfg)
	from := "distinct pg-grpc, 1 client, this run's load part"
	r.add(newSQLCheckResult(sqlcheckStatements[0], 100, 40, 20100, 400, from, 3))
	r.add(newSQLCheckResult(sqlcheckStatements[3], 150, 45, 30150, 400, from, 3))

	var table bytes.Buffer
	r.printTable(&table)
	var md bytes.Buffer
	r.markdown(&md)
	tests := []struct {
		what, got, want string
	}{
		{"table", table.String(), "sql check: ns per check, one goroutine, median of 3 rounds; added = (parser − old filter) / p50 of a fenced PostgreSQL write through fencegate, 400.0 µs (" + from + ")"},
		{"table", table.String(), "insert         100.0              40.0   0.40            20100.0  201.00                   -0.015                      5.000"},
		{"table", table.String(), "cte         150.0              45.0   0.30            30150.0  201.00                   -0.026                      7.500"},
		{"table", table.String(), "[met] SQL check: parser cached (the steady state) − old filter ≤ 5 % of a fenced write's p50, insert statement: -0.015 % ((40.0 − 100.0) ns over a 400.0 µs write); largest of the 2 statements -0.015 % (insert)"},
		{"table", table.String(), "[met] SQL check: parser uncached (every statement parsed) − old filter ≤ 5 % of a fenced write's p50, insert statement: 5.000 % ((20100.0 − 100.0) ns over a 400.0 µs write); largest of the 2 statements 7.500 % (cte)"},
		{"markdown", md.String(), "| insert | 100.0 | 40.0 | 0.40 | 20100.0 | 201.00 | -0.015 | 5.000 |"},
		{"markdown", md.String(), "| cte | 150.0 | 45.0 | 0.30 | 30150.0 | 201.00 | -0.026 | 7.500 |"},
		{"markdown", md.String(), "- insert: `" + insertSQL + "`"},
		{"markdown", md.String(), "| SQL check: parser uncached (every statement parsed) − old filter ≤ 5 % of a fenced write's p50, insert statement | 5.000 % "},
	}
	// Column widths are tabwriter's business: compare words.
	squash := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	for _, tt := range tests {
		if !strings.Contains(squash(tt.got), squash(tt.want)) {
			t.Errorf("%s lacks %q; got:\n%s", tt.what, tt.want, tt.got)
		}
	}
	if strings.Contains(squash(table.String()), "sqlcheck 1 insert") || strings.Contains(md.String(), "| sqlcheck | 1 |") {
		t.Errorf("sqlcheck rows in the load table; got:\n%s\n%s", table.String(), md.String())
	}

	var line map[string]any
	if err := json.Unmarshal([]byte(r.results[0].jsonLine()), &line); err != nil {
		t.Fatal(err)
	}
	if line["scenario"] != "sqlcheck" || line["path"] != "insert" {
		t.Errorf("JSON line scenario %v, path %v; want sqlcheck, insert", line["scenario"], line["path"])
	}
	sc, _ := line["sqlcheck"].(map[string]any)
	for k, want := range map[string]any{
		"sql": insertSQL, "old_filter_ns": 100.0, "parser_cached_ns": 40.0, "parser_uncached_ns": 20100.0,
		"cached_over_old": 0.4, "uncached_over_old": 201.0, "cached_added_pct_of_write": -0.015,
		"uncached_added_pct_of_write": 5.0, "goal_pct": 5.0, "write_p50_us": 400.0, "write_p50_from": from, "rounds": 3.0,
	} {
		if sc[k] != want {
			t.Errorf("JSON sqlcheck.%s = %v, want %v", k, sc[k], want)
		}
	}
}

func TestSQLCheckGoalsUnmeasured(t *testing.T) {
	cfg, _ := parseConfig(nil)
	r := newReport(cfg)
	n := 0
	for _, g := range r.goals() {
		if strings.HasPrefix(g.name, "SQL check:") {
			n++
			if g.state != 0 || g.value != "not measured" {
				t.Errorf("goal %q without a run: got %q (state %d), want not measured (state 0)", g.name, g.value, g.state)
			}
		}
	}
	if n != 2 {
		t.Errorf("got %d SQL check goals, want 2", n)
	}
}

func TestSQLCheckStatementsPassBothChecks(t *testing.T) {
	for _, st := range sqlcheckStatements {
		if msg := oldCheckStatement(st.sql); msg != "" {
			t.Errorf("old filter refuses %s: %s", st.name, msg)
		}
	}
	if sqlcheckStatements[0].sql != insertSQL {
		t.Errorf("first statement %q, want the write path's %q", sqlcheckStatements[0].sql, insertSQL)
	}
}

// TestOldFilterMissesAttacks records why the filter was replaced, and that
// the copy measured here is the old filter: it let these through.
func TestOldFilterMissesAttacks(t *testing.T) {
	for _, sql := range []string{
		"-- x\rCOMMIT\nWORK",
		`SELECT * FROM fencegate/**/.fences`,
		`SELECT * FROM U&"fenc\0065gate".fences`,
		`SELECT set_config('search_path','evil, pg_catalog, public', false)`,
		`SELECT pg_advisory_lock(7378424937698517364)`,
		`CREATE RULE r AS ON INSERT TO t DO INSTEAD NOTHING`,
		`CREATE TEMP TABLE jobs(id int)`,
	} {
		if msg := oldCheckStatement(sql); msg != "" {
			t.Errorf("oldCheckStatement(%q): got %q, want it missed (the copy is not the old filter)", sql, msg)
		}
	}
}
