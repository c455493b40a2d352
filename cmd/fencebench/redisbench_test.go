package main

import (
	"os"
	"path/filepath"
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
