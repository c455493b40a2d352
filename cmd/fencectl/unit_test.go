package main

import (
	"io"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestKillDeadline(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name        string
		noticed     time.Time
		provenUntil time.Time
		grace       time.Duration
		margin      time.Duration
		want        time.Time
	}{
		{"grace fits", t0, t0.Add(10 * time.Second), 2 * time.Second, time.Second, t0.Add(2 * time.Second)},
		{"lease ends first", t0, t0.Add(2 * time.Second), 2 * time.Second, time.Second, t0.Add(time.Second)},
		{"noticed late: deadline past", t0, t0.Add(-time.Second), 2 * time.Second, time.Second, t0.Add(-2 * time.Second)},
		{"no grace", t0, t0.Add(10 * time.Second), 0, time.Second, t0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := killDeadline(tc.noticed, tc.provenUntil, tc.grace, tc.margin); !got.Equal(tc.want) {
				t.Errorf("got %v, want %v", got.Sub(t0), tc.want.Sub(t0))
			}
		})
	}
}

func TestRunConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name       string
		rc         runConfig
		wantMargin time.Duration
		wantErr    string
	}{
		{"defaults", runConfig{Election: "e", TTL: 10 * time.Second, Grace: 2 * time.Second}, 10 * time.Second / 3, ""},
		{"long grace capped", runConfig{Election: "e", TTL: 10 * time.Second, Grace: 8 * time.Second}, 5 * time.Second, ""},
		{"grace+margin", runConfig{Election: "e", TTL: 10 * time.Second, Grace: 3 * time.Second}, 4 * time.Second, ""},
		{"no election", runConfig{TTL: 10 * time.Second}, 0, "--election is required"},
		{"slash", runConfig{Election: "a/b", TTL: 10 * time.Second}, 0, "without '/'"},
		{"fractional ttl", runConfig{Election: "e", TTL: 1500 * time.Millisecond}, 0, "whole number of seconds"},
		{"negative grace", runConfig{Election: "e", TTL: 10 * time.Second, Grace: -1}, 0, "negative"},
		{"kill margin too big", runConfig{Election: "e", TTL: 4 * time.Second, KillMargin: 3 * time.Second}, 0, "--kill-margin"},
		{"fence with a space", runConfig{Election: "e", Fence: "a b", TTL: 10 * time.Second}, 0, "fence \"a b\""},
		{"election not a fence name", runConfig{Election: "{e}", TTL: 10 * time.Second}, 0, "default the election's name"},
		{"fence of its own", runConfig{Election: "e", Fence: "billing.v2", TTL: 10 * time.Second, Grace: 2 * time.Second}, 10 * time.Second / 3, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.rc.validate()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v, want none", err)
			}
			if got != tc.wantMargin {
				t.Errorf("safety margin: got %v, want %v", got, tc.wantMargin)
			}
		})
	}
}

func TestChildEnv(t *testing.T) {
	got := childEnv([]string{"HOME=/root", "FENCECTL_TOKEN=s", "FENCECTL_ETCD_PASSWORD=p", "FENCEGATE_TOKEN=1", "PGOPTIONS=-c a=b"},
		"my fence", "el", 42, "https://gw:7080")
	want := []string{
		"HOME=/root",
		"FENCEGATE_FENCE=my fence",
		"FENCEGATE_TOKEN=42",
		"FENCEGATE_ELECTION=el",
		"FENCEGATE_HTTP_ADDR=https://gw:7080",
		`PGOPTIONS=-c a=b -c fencegate.fence=my\ fence -c fencegate.token=42`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestParseRejections(t *testing.T) {
	body := `# HELP fencegate_rejections_total Writes refused.
# TYPE fencegate_rejections_total counter
fencegate_rejections_total{fence="jobs",reason="stale_token"} 3
fencegate_rejections_total{fence="a\"b",reason="term_ended"} 1 1700000000000
fencegate_rejections_totalx{fence="x",reason="y"} 9
fencegate_requests_total{backend="postgres",outcome="accepted"} 7
fencegate_rejections_total{fence="broken"
`
	got := parseRejections([]byte(body))
	want := map[[2]string]uint64{{"jobs", "stale_token"}: 3, {`a"b`, "term_ended"}: 1}
	if !maps.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestCommandParse(t *testing.T) {
	for _, tc := range []struct {
		name         string
		interspersed bool
		args         []string
		want         []string
		wantOut      string
	}{
		{"flags after the name", true, []string{"get", "billing", "-w", "json"}, []string{"get", "billing"}, "json"},
		{"flags first", true, []string{"-w", "json", "get", "billing"}, []string{"get", "billing"}, "json"},
		{"after --, all positional", true, []string{"a", "--", "-w", "json"}, []string{"a", "-w", "json"}, "table"},
		{"run: CMD's flags are CMD's", false, []string{"--ttl", "3s", "sh", "-w", "json"}, []string{"sh", "-w", "json"}, "table"},
		{"run: --", false, []string{"--", "sh", "-c", "x"}, []string{"sh", "-c", "x"}, "table"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := defaultGlobalConfig()
			c := newCommand(g, "x", "", "")
			c.interspersed = tc.interspersed
			var ttl time.Duration
			c.fs.DurationVar(&ttl, "ttl", 0, "")
			got, err := c.parse(tc.args, io.Discard, io.Discard)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if !slices.Equal(got, tc.want) || g.WriteOut != tc.wantOut {
				t.Errorf("got %q and -w %s, want %q and -w %s", got, g.WriteOut, tc.want, tc.wantOut)
			}
		})
	}
}

// TestRefusalOneLine: a refusal names its reason once, whether or not the
// message already leads with it.
func TestRefusalOneLine(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{
			`{"code":9,"message":"fencegate: STALE_TOKEN: token 7 is below the high-water mark 8","details":[{"reason":"STALE_TOKEN"}]}`,
			"POST /v1/fences/jobs/reset: fencegate: STALE_TOKEN: token 7 is below the high-water mark 8 (HTTP 409)",
		},
		{
			`{"code":5,"message":"Not Found","details":[{"reason":"NOT_FOUND"}]}`,
			"POST /v1/fences/jobs/reset: NOT_FOUND: Not Found (HTTP 409)",
		},
		{`{"code":5,"message":"Not Found"}`, "POST /v1/fences/jobs/reset: Not Found (HTTP 409)"},
		{`not json`, "POST /v1/fences/jobs/reset: HTTP 409: not json"},
	} {
		if got := refusal(409, "POST", "/v1/fences/jobs/reset", []byte(c.body)).Error(); got != c.want {
			t.Errorf("refusal(%s):\n got %s\nwant %s", c.body, got, c.want)
		}
	}
}
