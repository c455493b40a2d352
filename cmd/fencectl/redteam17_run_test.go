package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRedTeam17SigtstpLeavesChildUnsupervised: CMD runs in a process
// group of its own, so job control no longer reaches it: Ctrl-Z on the
// terminal, or `kill -TSTP`, stops fencectl (SIGTSTP's default action;
// fencectl neither catches nor forwards it) and leaves CMD running with
// nobody renewing the lease or watching it. The lease expires in etcd,
// another candidate may lead, and CMD goes on writing with the old token
// for as long as fencectl stays stopped. Unlike SIGSTOP (documented as
// the frozen-fencectl case), SIGTSTP can be caught. Expected: fencectl
// forwards SIGTSTP to CMD's group (as a shell would have stopped the
// whole job), or does not stop at all; either way CMD writes nothing
// after the lease can have expired.
func TestRedTeam17SigtstpLeavesChildUnsupervised(t *testing.T) {
	c := newClient(t)
	out := filepath.Join(t.TempDir(), "writes")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := startFencectl(t, []string{childEnvVar + "=writer", "OUT=" + out},
		runArgs(t, "--election=tstp", "--ttl=2s", "--grace=200ms", "--kill-margin=500ms", "--", self)...)
	waitFor(t, "the child's first write", func() bool { return wroteLine(out) || p.exited() })
	_, _, lease, ok := leaderKey(t, c, testPrefix(t), "tstp")
	if !ok {
		t.Fatalf("no leader key:\n%s", p.out)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTSTP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.cmd.Process.Signal(syscall.SIGCONT) }()
	// Does the lease end in etcd (fencectl stopped)? A fencectl that
	// goes on running keeps it alive: then nothing is wrong.
	var ended time.Time
	for deadline := time.Now().Add(6 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if r, err := c.TimeToLive(t.Context(), lease); err == nil && r.TTL < 0 {
			ended = time.Now()
			break
		}
	}
	if ended.IsZero() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		return // fencectl kept its lease alive through SIGTSTP
	}
	time.Sleep(500 * time.Millisecond)
	if last := time.Unix(0, lastInt(t, out)); last.After(ended) {
		t.Errorf("after SIGTSTP to fencectl, its child wrote %v after the lease had ended in etcd (a next leader may be writing): nobody stopped it\n%s",
			last.Sub(ended).Round(time.Millisecond), p.out)
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	p.wait(t)
}

// TestRedTeam17ForkChainOutlivesRun: when CMD exits, fencectl promises
// that whatever it left is killed before it resigns. It kills what one
// /proc scan finds, up to 50 times 10ms apart, then resigns anyway and
// exits 0 without a word. A descendant that forks a copy of itself and
// exits, over and over (a respawning daemon), always has a fresh child
// the scan has not seen yet: it outlives the loop, and keeps running
// with FENCEGATE_TOKEN after the leadership was handed back, while the
// next leader is elected. Expected: nothing below fencectl runs once it
// has exited (e.g. SIGSTOP the tree until no new process appears, then
// SIGKILL it: a stopped process cannot fork).
func TestRedTeam17ForkChainOutlivesRun(t *testing.T) {
	dir := t.TempDir()
	beat, ready := filepath.Join(dir, "beat"), filepath.Join(dir, "ready")
	// Six chains. Each generation: stop once the test's directory is gone
	// (cleanup), start the next generation, note its pid, exit.
	chain := `[ -d "$DIR" ] || exit 0; sh -c "$CHAIN" </dev/null >/dev/null 2>&1 & echo $$ >> "$BEAT"; exit 0`
	p := startFencectl(t, []string{"DIR=" + dir, "BEAT=" + beat, "READY=" + ready, "CHAIN=" + chain},
		runArgs(t, "--election=chain", "--ttl=2s", "--", "sh", "-c",
			`for i in 1 2 3 4 5 6; do setsid sh -c "$CHAIN" </dev/null >/dev/null 2>&1 & done; sleep 0.3; touch "$READY"; exit 0`)...)
	t.Cleanup(func() {
		// Stop the chain: each generation exits once dir is gone.
		_ = os.RemoveAll(dir)
		time.Sleep(200 * time.Millisecond)
	})
	code := p.wait(t)
	if !exists(ready) {
		t.Fatalf("the child did not run (exit %d):\n%s", code, p.out)
	}
	n0 := beats(t, beat)
	time.Sleep(500 * time.Millisecond)
	n1 := beats(t, beat)
	if n1 > n0 {
		t.Errorf("fencectl exited %d (resigned) and processes it started are still running with its token: %d new generations of the child's daemon in 500ms after its exit\n%s",
			code, n1-n0, p.out)
	}
}

func beats(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// TestRedTeam17BrokenStderrKillsFencectlAtLoss: fencectl's first act on
// losing the leadership is to print why on stderr, before it signals
// anything. When stderr is a pipe or stream socket whose reader is gone
// (`fencectl run ... 2>&1 | tee log` after tee died, journald restarted
// under a systemd unit), that write raises SIGPIPE, whose default action
// the Go runtime keeps for fd 2: fencectl dies on the spot. The kernel
// then kills CMD (Pdeathsig), but nothing kills the rest of CMD's process
// group: a worker process CMD started goes on with the token of a term
// that is over, and no one ever learns why. Expected: a failed diagnostic
// write does not stop fencectl from stopping CMD's whole tree.
func TestRedTeam17BrokenStderrKillsFencectlAtLoss(t *testing.T) {
	c := newClient(t)
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout syncBuffer
	cmd := exec.Command(binPath, runArgs(t, "--election=pipe", "--ttl=5s", "--grace=1s", "--", "sh", "-c",
		// The worker (same process group) writes nothing to stderr.
		`sleep 600 </dev/null >/dev/null 2>&1 & echo $! > "$PIDFILE.tmp"; mv "$PIDFILE.tmp" "$PIDFILE"; trap 'exit 0' TERM; wait`)...)
	cmd.Env = append(os.Environ(), "PIDFILE="+pidFile)
	cmd.Stdout, cmd.Stderr = &stdout, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	waitFor(t, "the worker's pid", func() bool { return exists(pidFile) })
	pid, err := strconv.Atoi(strings.TrimSpace(readFileT(t, pidFile)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	r.Close() // the reader of fencectl's stderr goes away
	key, _, _, ok := leaderKey(t, c, testPrefix(t), "pipe")
	if !ok {
		t.Fatal("no leader key")
	}
	if _, err := c.Delete(t.Context(), key); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("fencectl still running 15s after its key was deleted")
	}
	time.Sleep(200 * time.Millisecond)
	if alive(pid) {
		t.Errorf("leadership ended (key deleted), fencectl exited (%v), and CMD's worker %d still runs with the token", cmd.ProcessState, pid)
	}
}
