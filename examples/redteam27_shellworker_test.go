package examples

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRedTeam27ShellWorkerSwallowsStaleToken
//
// Attack/Problem: examples/shell/worker.sh is the job template of the
// shell example (`fencectl run --election E -- ./worker.sh NAME`): the
// one worker an operator copies to get "a shell job needs curl and
// nothing else". Its write is refused the way a zombie's is: the job runs
// with a token whose term has been taken over (a retry of a queued job, a
// job that outlived its term: exactly what run.sh's late_write shows), or
// the write fails for any other reason (BACKEND_UNAVAILABLE, possibly
// with outcome unknown; STATEMENT_FAILED).
//
// What happened: worker.sh sends the write with `curl -sS` and no
// --fail / --fail-with-body and never looks at the HTTP status, so curl
// exits 0 on HTTP 409 STALE_TOKEN and the script (set -eu) exits 0: the
// refusal is printed and swallowed. Under `fencectl run`, which "exits
// with CMD's status", the refused job reports success, and whatever the
// operator chains after it (`&& mark-done`, a systemd unit's success, a
// CI step) proceeds as if the write landed; the script even records the
// token to $SPOOL as written. README.md, "fencectl run", says the opposite
// for exactly this case: "`--fail-with-body` makes a refusal CMD's
// failure: fencectl exits with CMD's status". The shipped example does the
// unsafe thing its own README warns against, and examples_test.go only
// checks the output text, never the job's status.
//
// What should happen: worker.sh exits non-zero when fencegate refuses its
// write (curl --fail-with-body, or checking %{http_code}), so a STALE_TOKEN
// / TERM_ENDED refusal makes the job, and fencectl run, fail.
//
// Severity: medium-low (the data stays safe, fencegate refused the write;
// but the shipped template reports a refused write as success, so callers
// cannot tell a zombie's lost write from a done one).
func TestRedTeam27ShellWorkerSwallowsStaleToken(t *testing.T) {
	bin := build(t)
	dev := startDev(t, filepath.Join(bin, "fencegate"))
	setup, err := os.ReadFile("setup.sql")
	if err != nil {
		t.Fatal(err)
	}
	conn := dev.connect(t)
	if _, err := conn.Exec(t.Context(), string(setup)); err != nil {
		t.Fatalf("setup.sql: %v", err)
	}
	const election = "rt27-shell"
	worker, err := filepath.Abs("shell/worker.sh")
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(),
		"FENCECTL_ENDPOINT="+dev.http, "FENCECTL_ETCD_ENDPOINTS="+dev.etcd)

	run := func(name string, extraEnv []string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Env = append(append([]string{}, env...), extraEnv...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	// worker-1 leads and writes under fencectl run, leaving its token in
	// the spool as the example does; then worker-2 leads and writes.
	spool := filepath.Join(t.TempDir(), "spool")
	fencectl := filepath.Join(bin, "fencectl")
	out, err := run(fencectl, []string{"SPOOL=" + spool},
		"run", "--election", election, "--value", "worker-1", "--", worker, "worker-1")
	if err != nil || !strings.Contains(out, "HTTP 200") {
		t.Fatalf("worker-1 under fencectl run: %v\n%s", err, out)
	}
	b, err := os.ReadFile(spool)
	if err != nil {
		t.Fatal(err)
	}
	t1 := strings.TrimSpace(string(b))
	out, err = run(fencectl, nil,
		"run", "--election", election, "--value", "worker-2", "--", worker, "worker-2")
	if err != nil || !strings.Contains(out, "HTTP 200") {
		t.Fatalf("worker-2 under fencectl run: %v\n%s", err, out)
	}

	// The same job with worker-1's token, as fencectl run handed it to
	// the job (fence, token, address): its write is refused STALE_TOKEN.
	out, err = run(worker, []string{
		"FENCEGATE_FENCE=" + election, "FENCEGATE_ELECTION=" + election,
		"FENCEGATE_TOKEN=" + t1, "FENCEGATE_HTTP_ADDR=" + dev.http,
	}, "worker-1 (zombie)")
	if !strings.Contains(out, "STALE_TOKEN") || !strings.Contains(out, "HTTP 409") {
		t.Fatalf("worker.sh with the stale token %s: got %v\n%s\nwant the write refused STALE_TOKEN, HTTP 409", t1, err, out)
	}
	var exit *exec.ExitError
	if err == nil {
		t.Errorf("examples/shell/worker.sh exited 0 although fencegate refused its write (STALE_TOKEN, HTTP 409):\n%s\n"+
			"a job under `fencectl run` would report the refused write as success; README.md says --fail-with-body makes a refusal CMD's failure", out)
	} else if !errors.As(err, &exit) {
		t.Errorf("worker.sh: %v", err)
	}
	if got := workers(t, conn, "shell"); strings.Contains(strings.Join(got, ","), "zombie") {
		t.Errorf("the zombie's row landed: %q", got)
	}
}
