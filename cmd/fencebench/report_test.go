package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	sorted := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	tests := []struct {
		q    float64
		want time.Duration
	}{
		{0.5, 5},
		{0.99, 10},
		{0, 1},
		{1, 10},
	}
	for _, tt := range tests {
		if got := percentile(sorted, tt.q); got != tt.want {
			t.Errorf("percentile(%v) = %v, want %v", tt.q, got, tt.want)
		}
	}
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("percentile of nothing = %v, want 0", got)
	}
}

func TestParseConfigDefaults(t *testing.T) {
	tests := []struct {
		args         []string
		wantDuration time.Duration
		wantKill     int
		wantClients  []int
	}{
		{nil, 5 * time.Second, 20, []int{1, 16, 64}},
		{[]string{"--quick"}, time.Second, 3, []int{1, 16, 64}},
		{[]string{"--quick", "--duration=2s", "--clients=4,8"}, 2 * time.Second, 3, []int{4, 8}},
	}
	for _, tt := range tests {
		cfg, err := parseConfig(tt.args)
		if err != nil {
			t.Fatalf("parseConfig(%q): %v", tt.args, err)
		}
		if cfg.duration != tt.wantDuration || cfg.killTrials != tt.wantKill || !slices.Equal(cfg.clients, tt.wantClients) {
			t.Errorf("parseConfig(%q) = duration %v, kill trials %d, clients %v; want %v, %d, %v",
				tt.args, cfg.duration, cfg.killTrials, cfg.clients, tt.wantDuration, tt.wantKill, tt.wantClients)
		}
	}
	for _, bad := range [][]string{{"--paths=pg-nope"}, {"--only=everything"}, {"--ttl=1500ms"}, {"--clients=0"}} {
		if _, err := parseConfig(bad); err == nil {
			t.Errorf("parseConfig(%q) succeeded, want an error", bad)
		}
	}
}

func TestGoals(t *testing.T) {
	cfg, err := parseConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	r := newReport(cfg)
	r.add(result{Scenario: "distinct", Path: pgDirectFenced, Clients: 16, OpsPerSec: 1000, P50us: 100})
	r.add(result{Scenario: "distinct", Path: pgGRPC, Clients: 16, OpsPerSec: 900, P50us: 200})
	r.add(result{Scenario: "distinct", Path: pgHTTP, Clients: 16, OpsPerSec: 500})
	r.add(result{Scenario: "stale", Path: pgGRPC, Clients: 16, OpsPerSec: 2600})         // 2.9× the accepted 900
	r.add(result{Scenario: "distinct", Path: pgGRPCSecure, Clients: 16, OpsPerSec: 819}) // 0.91 × pg-grpc
	r.add(result{Scenario: "distinct", Path: pgHTTPSecure, Clients: 16, OpsPerSec: 440}) // 0.88 × pg-http
	states := map[string]int{}
	for _, g := range r.goals() {
		states[g.name] = g.state
	}
	tests := []struct {
		goal string
		want int
	}{
		{"pg-grpc ≥ 0.85 × pg-direct-fenced, 16 clients, distinct fences", 1},
		{"pg-http ≥ 0.70 × pg-direct-fenced, 16 clients, distinct fences", 2},
		{"added p50 of pg-grpc over pg-direct-fenced ≤ 150 µs, 16 clients", 1},
		{"stale refusals ≥ 3 × accepted writes, pg-grpc, 16 clients", 2},
		{"pg-grpc ≥ 0.85 × pg-direct-fenced, 64 clients, distinct fences", 0},
		{"pg-grpc-secure ≥ 0.90 × pg-grpc, 16 clients, distinct fences", 1},
		{"pg-http-secure ≥ 0.90 × pg-http, 16 clients, distinct fences", 2},
		{"redis-grpc-secure ≥ 0.90 × redis-grpc, 16 clients, distinct fences", 0},
	}
	for _, tt := range tests {
		got, ok := states[tt.goal]
		if !ok {
			t.Errorf("goal %q missing", tt.goal)
			continue
		}
		if got != tt.want {
			t.Errorf("goal %q: got state %d, want %d", tt.goal, got, tt.want)
		}
	}
}

func TestWriteMarkdownKeepsTheRest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "BENCH.md")
	before := "# title\n\nintro\n\n" + mdBegin + "\nold table\n" + mdEnd + "\n\n## notes\n\nkept\n"
	if err := os.WriteFile(path, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, _ := parseConfig(nil)
	r := newReport(cfg)
	r.add(result{Scenario: "distinct", Path: pgDirectPlain, Clients: 1, OpsPerSec: 1234})
	if err := r.writeMarkdown(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, want := range []string{"# title\n\nintro\n\n" + mdBegin, "| distinct | 1 | pg-direct-plain | 1234 |", mdEnd + "\n\n## notes\n\nkept\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q; got:\n%s", want, got)
		}
	}
	if strings.Contains(got, "old table") {
		t.Errorf("old generated part kept; got:\n%s", got)
	}
}

func TestStatFields(t *testing.T) {
	f, err := statFields(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if f[1] != int64(os.Getppid()) {
		t.Errorf("ppid field = %d, want %d", f[1], os.Getppid())
	}
}

// TestRatioText: a missed ratio never prints as the goal's own figure.
func TestRatioText(t *testing.T) {
	for _, tt := range []struct {
		q, least float64
		want     string
	}{
		{0.91, 0.85, "0.91"},
		{0.85, 0.85, "0.85"},
		{0.6996, 0.70, "0.6996 (short by 0.04% of the reference)"},
		{0.66, 0.85, "0.66 (short by 19% of the reference)"},
		{0.845, 0.85, "0.84 (short by 0.50% of the reference)"},
	} {
		if got := ratioText(tt.q, tt.least); got != tt.want {
			t.Errorf("ratioText(%v, %v): got %q, want %q", tt.q, tt.least, got, tt.want)
		}
	}
}
