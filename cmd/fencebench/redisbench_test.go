package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestParseRedisbenchCSV reads redis-benchmark 7.0's --csv output, with a
// line of -e before it, and refuses output without the columns it needs.
func TestParseRedisbenchCSV(t *testing.T) {
	const out = "Error: some line -e printed before the table\n" +
		`"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"` + "\n" +
		`"SET {bench-rb}:k:__rand_int__ v","19881.21","0.048","0.016","0.039","0.079","0.111","1.303"` + "\n"
	rps, p50, p99, err := parseRedisbenchCSV([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if rps != 19881.21 || p50 != 39 || p99 != 111 {
		t.Fatalf("got rps %v, p50 %v µs, p99 %v µs; want 19881.21, 39, 111", rps, p50, p99)
	}
	for _, bad := range []string{
		"",
		`"test","rps"` + "\n" + `"SET k v","100.00"` + "\n", // redis-benchmark 6: no latency columns
		"SET: 100.00 requests per second\n",                 // -q, not --csv
	} {
		if _, _, _, err := parseRedisbenchCSV([]byte(bad)); err == nil {
			t.Errorf("parseRedisbenchCSV(%q): got nil error", bad)
		}
	}
}

// TestPgbenchLatencies reads pgbench -l's logs, one per thread, into one
// sorted sample, and refuses a directory without them.
func TestPgbenchLatencies(t *testing.T) {
	dir := t.TempDir()
	// client_id transaction_no time(µs) script_no time_epoch time_us
	logs := map[string]string{
		"tx.4242":   "0 0 129 0 1764318818 412345\n0 1 81 0 1764318818 412500\n",
		"tx.4242.1": "1 0 3000 0 1764318818 412600\n",
	}
	for name, body := range logs {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := pgbenchLatencies(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []int64{int64(81 * time.Microsecond), int64(129 * time.Microsecond), int64(3000 * time.Microsecond)}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	if _, err := pgbenchLatencies(t.TempDir()); err == nil {
		t.Error("a directory without logs: got nil error")
	}
	if err := os.WriteFile(filepath.Join(dir, "tx.1"), []byte("0 0 slow 0 1 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := pgbenchLatencies(dir); err == nil {
		t.Error("a line whose latency is not a number: got nil error")
	}
}

// TestToolGoals judges issues 13's and 14's goals from the pgbench and
// redisbench rows (figures of a run of 2026-11-28), keeps those rows out
// of the load table, and writes them as their own Markdown tables.
func TestToolGoals(t *testing.T) {
	cfg, err := parseConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	r := newReport(cfg)
	for _, x := range []result{
		{Scenario: "pgbench", Path: pgbenchDirectFenced, Clients: 1, OpsPerSec: 11749, P50us: 72},
		{Scenario: "pgbench", Path: pgbenchWire, Clients: 1, OpsPerSec: 7966, P50us: 111},
		{Scenario: "pgbench", Path: pgbenchBouncer, Clients: 1, OpsPerSec: 10597, P50us: 78},
		{Scenario: "pgbench", Path: pgbenchDirectFenced, Clients: 64, OpsPerSec: 5583},
		{Scenario: "pgbench", Path: pgbenchWire, Clients: 64, OpsPerSec: 4415},
		{Scenario: "redisbench", Path: rbDirectFenced, Clients: 1, OpsPerSec: 19194, P50us: 39},
		{Scenario: "redisbench", Path: rbRESP, Clients: 1, OpsPerSec: 8559, P50us: 87},
		{Scenario: "redisbench", Path: rbDirectFenced, Clients: 64, OpsPerSec: 52648},
		{Scenario: "redisbench", Path: rbTwemproxy, Clients: 64, OpsPerSec: 48548},
		{Scenario: "redisbench", Path: rbRESP, Clients: 64, OpsPerSec: 28263, Note: "redis-benchmark -c 64 -P 1"},
		{Scenario: "redisbench-P16", Path: rbDirectFenced, Clients: 64, OpsPerSec: 157170, Note: "redis-benchmark -c 64 -P 16 EVALSHA"},
		{Scenario: "redisbench-P16", Path: rbRESP, Clients: 64, OpsPerSec: 200018, Note: "redis-benchmark -c 64 -P 16"},
	} {
		r.add(x)
	}
	got := map[string]goal{}
	for _, g := range r.goals() {
		got[g.name] = g
	}
	for _, tt := range []struct {
		goal, value string
		state       int
	}{
		{"pgbench: added p50 of pgbench-wire over pgbench-direct-fenced ≤ 60 µs, 1 client", "39 µs", 1},
		{"pgbench: pgbench-wire ≥ 0.85 × pgbench-direct-fenced, 64 clients", "0.79 (short by 6% of the reference)", 2},
		{"pgbench: pgbench-wire ≥ 1.00 × pgbench-bouncer, 1 clients", "0.75 (short by 25% of the reference)", 2},
		{"pgbench: pgbench-wire ≥ 0.85 × pgbench-direct-fenced, 16 clients", "not measured", 0},
		{"redis-benchmark: redisbench-resp ≥ 0.60 × redisbench-direct-fenced, 64 clients, -P 1", "0.54 (short by 6% of the reference)", 2},
		{"redis-benchmark: redisbench-resp ≥ 0.80 × redisbench-direct-fenced, 64 clients, -P 16", "1.27", 1},
		{"redis-benchmark: redisbench-resp ≥ 0.80 × redisbench-twemproxy, 64 clients, -P 1", "0.58 (short by 22% of the reference)", 2},
		{"redis-benchmark: added p50 of redisbench-resp over redisbench-direct-fenced ≤ 50 µs, 1 client", "48 µs", 1},
	} {
		g, ok := got[tt.goal]
		if !ok {
			t.Errorf("goal %q missing", tt.goal)
			continue
		}
		if g.value != tt.value || g.state != tt.state {
			t.Errorf("goal %q: got %q (state %d), want %q (state %d)", tt.goal, g.value, g.state, tt.value, tt.state)
		}
	}
	if rows := r.loadRows(); len(rows) != 0 {
		t.Errorf("the load table holds %d pgbench or redisbench rows: %v", len(rows), rows)
	}
	var md strings.Builder
	r.markdownRedisbench(&md)
	for _, want := range []string{
		"| redis-benchmark | clients | -P | rps | × direct-fenced | × twemproxy | p50 µs | p99 µs | proxy CPU µs/op | Redis CPU µs/op | client CPU µs/op |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n",
		"| redisbench-resp | 64 | 16 | 200018 | 1.27 | - | 0 | 0 | - | - | - |\n",
		"```sh\nredis-benchmark -c 64 -P 16 EVALSHA\nredis-benchmark -c 64 -P 16\n```",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("redis-benchmark's Markdown lacks %q; got:\n%s", want, md.String())
		}
	}
	if strings.Contains(md.String(), "-c 64 -P 1\n") {
		t.Errorf("redis-benchmark's Markdown gives the commands of a shape other than the last:\n%s", md.String())
	}
}
