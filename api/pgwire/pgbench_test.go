package pgwire_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/pgwire"
)

// pgbench runs the real pgbench against the listener.
func (e *env) pgbench(t *testing.T, fence string, token uint64, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "pgbench", append([]string{"-h", "127.0.0.1", "-p", e.port, "-U", "worker"}, append(args, "postgres")...)...)
	env := []string{"PGOPTIONS=-c fencegate.fence=" + fence + " -c fencegate.token=" + fmt.Sprint(token)}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestPgbench: pgbench initialises (-i -I dtg) and runs its TPC-B-like
// script in every query mode, and a pipelined script, through the
// listener; a zombie's run is refused and changes nothing.
func TestPgbench(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	if _, err := e.admin.Exec(ctx, "GRANT CREATE ON SCHEMA public TO worker"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.admin.Exec(context.WithoutCancel(ctx), "REVOKE CREATE ON SCHEMA public FROM worker") })
	old, resign := e.lead(t, "bench")
	if out, err := e.pgbench(t, "bench", old, "-i", "-I", "dtg", "-s", "1"); err != nil {
		t.Fatalf("pgbench -i: %v\n%s", err, out)
	}
	pipeline := filepath.Join(t.TempDir(), "pipeline.sql")
	if err := os.WriteFile(pipeline, []byte(`\set aid random(1, 100000)
\set delta random(-5000, 5000)
\startpipeline
BEGIN;
UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (1, 1, :aid, :delta, CURRENT_TIMESTAMP);
END;
\endpipeline
`), 0o644); err != nil {
		t.Fatal(err)
	}
	runs := [][]string{
		// -n: no VACUUM first; VACUUM cannot run in a transaction
		// block, and through fencegate every statement is in one.
		{"-n", "-M", "simple", "-c", "2", "-t", "20"},
		{"-n", "-M", "extended", "-c", "2", "-t", "20"},
		{"-n", "-M", "prepared", "-c", "2", "-t", "20"},
		{"-n", "-M", "extended", "-c", "2", "-t", "20", "-f", pipeline},
	}
	want := 0
	for _, args := range runs {
		out, err := e.pgbench(t, "bench", old, args...)
		if err != nil || !strings.Contains(out, "number of failed transactions: 0") {
			t.Fatalf("pgbench %v: %v\n%s", args, err, out)
		}
		want += 40
		if got := e.count(t, "pgbench_history"); got != want {
			t.Fatalf("pgbench %v: got %d history rows, want %d\n%s", args, got, want, out)
		}
	}
	if got := e.count(t, "pgbench_history"); got != want {
		t.Fatalf("got %d history rows, want %d", got, want)
	}
	resign()
	cur, _ := e.lead(t, "bench")
	if out, err := e.pgbench(t, "bench", cur, "-n", "-M", "prepared", "-c", "1", "-t", "1"); err != nil {
		t.Fatalf("new leader: %v\n%s", err, out)
	}
	for _, args := range runs {
		out, err := e.pgbench(t, "bench", old, args...)
		if err == nil || !strings.Contains(out, "STALE_TOKEN") {
			t.Fatalf("zombie pgbench %v: got %v, want STALE_TOKEN\n%s", args, err, out)
		}
	}
	if got := e.count(t, "pgbench_history"); got != want+1 {
		t.Fatalf("got %d history rows, want %d (the zombie's none)", got, want+1)
	}
}
