package deploy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// rateInterval is what the tests put for Grafana's $__rate_interval: a few
// scrapes of the live test's Prometheus, which scrapes every second.
const rateInterval = "10s"

// dashboardQuery is one PromQL expression of the dashboard.
type dashboardQuery struct {
	panel, refID, expr string
}

func (q dashboardQuery) String() string { return fmt.Sprintf("panel %q query %s", q.panel, q.refID) }

// dashboardQueries reads every target expression of the Grafana
// dashboard, with Grafana's variables replaced as Grafana would.
func dashboardQueries(t *testing.T) []dashboardQuery {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("grafana", "fencegate.json"))
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var dash struct {
		UID    string  `json:"uid"`
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("grafana/fencegate.json: %v", err)
	}
	var qs []dashboardQuery
	for _, p := range dash.Panels {
		if p.Type == "row" {
			if len(p.Panels) > 0 {
				t.Errorf("row %q: collapsed rows' panels are not checked; keep rows open", p.Title)
			}
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q: no query", p.Title)
		}
		for _, tg := range p.Targets {
			expr := strings.ReplaceAll(tg.Expr, "$__rate_interval", rateInterval)
			if strings.Contains(expr, "$") {
				t.Errorf("panel %q: %s: a variable the test does not know", p.Title, tg.Expr)
			}
			qs = append(qs, dashboardQuery{panel: p.Title, refID: tg.RefID, expr: expr})
		}
	}
	if len(qs) < 10 {
		t.Fatalf("grafana/fencegate.json: got %d queries, want the dashboard's", len(qs))
	}
	return qs
}

// alertExprs is every alert rule's expression, by alert.
func alertExprs(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
				Expr  string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			out[r.Alert] = r.Expr
		}
	}
	return out
}

// promqlWords are PromQL's keywords, and its aggregation operators (which
// a label list may part from their parenthesis), taken for no metric.
var promqlWords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true,
	"inf": true, "nan": true, "atan2": true,
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
}

// promqlLabelLists are the keywords followed by a list of label names.
var promqlLabelLists = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

// metricNames is the metric names an expression selects: identifiers
// that are not functions, keywords, label names (in braces or after by,
// on, ...), strings, numbers or durations. promtool has checked that
// expressions parse; this finds what they name.
func metricNames(expr string) []string {
	var names []string
	isStart := func(c byte) bool { return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isPart := func(c byte) bool { return isStart(c) || c >= '0' && c <= '9' }
	skipString := func(i int) int {
		q := expr[i]
		for i++; i < len(expr) && expr[i] != q; i++ {
			if expr[i] == '\\' && q != '`' {
				i++
			}
		}
		return i + 1
	}
	skipTo := func(i int, end byte) int {
		for i < len(expr) && expr[i] != end {
			if c := expr[i]; c == '"' || c == '\'' || c == '`' {
				i = skipString(i)
				continue
			}
			i++
		}
		return i + 1
	}
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			i = skipString(i)
		case c == '{':
			i = skipTo(i, '}')
		case c == '[':
			i = skipTo(i, ']')
		case c >= '0' && c <= '9' || c == '.':
			for i < len(expr) && (isPart(expr[i]) || expr[i] == '.') {
				i++
			}
		case isStart(c):
			j := i
			for j < len(expr) && isPart(expr[j]) {
				j++
			}
			word := expr[i:j]
			k := j
			for k < len(expr) && (expr[k] == ' ' || expr[k] == '\n' || expr[k] == '\t') {
				k++
			}
			next := byte(0)
			if k < len(expr) {
				next = expr[k]
			}
			switch {
			case promqlLabelLists[strings.ToLower(word)]:
				if next == '(' {
					j = skipTo(k, ')')
				}
			case promqlWords[strings.ToLower(word)], next == '(':
			default:
				names = append(names, word)
			}
			i = j
		default:
			i++
		}
	}
	return names
}

func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`fencegate_ready == 0`, []string{"fencegate_ready"}},
		{`sum by (backend, outcome) (rate(fencegate_requests_total{outcome=~"a|b"}[5m])) > 0`, []string{"fencegate_requests_total"}},
		{`histogram_quantile(0.99, sum by (le) (rate(x_bucket{a="}"}[1m])))`, []string{"x_bucket"}},
		{`max by (election) (a) == 0 and max by (election) (max_over_time(b[30m])) == 1`, []string{"a", "b"}},
		{`label_replace(increase(c[15m]) > 0, "files", "TLS", "", "") or d`, []string{"c", "d"}},
		{`sum(rate(a[1m])) / on (x) group_left (y) sum(rate(b[1m])) or vector(0)`, []string{"a", "b"}},
		{`count(x == 0) or vector(1e3)`, []string{"x"}},
	} {
		if got := metricNames(tc.expr); !slices.Equal(got, tc.want) {
			t.Errorf("metricNames(%q): got %q, want %q", tc.expr, got, tc.want)
		}
	}
}

// TestDashboardParses checks, with promtool (Prometheus's own parser),
// that every dashboard query parses: each becomes a recording rule.
func TestDashboardParses(t *testing.T) {
	type rule struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var rules []rule
	for i, q := range dashboardQueries(t) {
		rules = append(rules, rule{Record: fmt.Sprintf("dashboard:query_%d", i), Expr: q.expr})
	}
	out, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "dashboard_rules.yml")
	if err := os.WriteFile(file, out, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("promtool", "check", "rules", file).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules of the dashboard's queries: %v\n%s", err, out)
	}
}
