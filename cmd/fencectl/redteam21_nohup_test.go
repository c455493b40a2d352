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

// TestRedTeam21NohupUndone
//
// Attack: `nohup fencectl run --election jobs -- worker &` (or fencectl
// started as a `cmd &` of a non-interactive shell, which starts it with
// SIGINT and SIGQUIT ignored). The caller ignored SIGHUP precisely so that
// closing the terminal does not stop the leader. But signal.Notify for
// SIGHUP and SIGINT un-ignores them in fencectl ("If the program was
// started with SIGHUP or SIGINT ignored, and Notify is called for either
// signal, a signal handler will be installed"), the Go runtime resets
// handled signals to SIG_DFL in the child it forks, and fencectl forwards
// what it catches to CMD's group.
//
// What happened (on this code): CMD started with SIGHUP and SIGINT at
// their default action, not ignored as its caller set them; the hangup
// (SIGHUP to fencectl, as the terminal's session sends it) was forwarded
// and killed CMD: fencectl resigned and exited 129, the leadership was
// given up because the operator closed a terminal nohup was meant to
// protect against.
//
// What should happen: a signal ignored when fencectl started stays
// ignored: fencectl does not catch it (signal.Ignored before Notify) and
// CMD inherits it ignored, as `nohup worker` alone would have it.
//
// Severity: low-medium (availability: a leader steps down on every
// terminal hangup; nothing unsafe is written).
func TestRedTeam21NohupUndone(t *testing.T) {
	c := newClient(t)
	dir := t.TempDir()
	status, ready := filepath.Join(dir, "status"), filepath.Join(dir, "ready")
	args := runArgs(t, "--election=nohup", "--ttl=5s", "--", "sh", "-c",
		`grep '^SigIgn' /proc/$$/status > "$STATUS"; touch "$READY"; while :; do sleep 0.05; done`)
	// `trap '' HUP INT` then exec: fencectl starts with both ignored, as
	// under nohup and as a background job of a script.
	p := &proc{
		cmd: exec.Command("sh", append([]string{"-c", `trap '' HUP INT; exec "$FENCECTL" "$@"`, "sh"}, args...)...),
		out: &syncBuffer{}, done: make(chan struct{}),
	}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.Env = append(os.Environ(), "STATUS="+status, "READY="+ready, "FENCECTL="+binPath)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		p.code = exitCode(p.cmd.ProcessState, nil)
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	waitFor(t, "CMD", func() bool { return exists(ready) || p.exited() })
	if p.exited() {
		t.Fatalf("fencectl exited %d:\n%s", p.code, p.out)
	}
	if _, _, _, ok := leaderKey(t, c, testPrefix(t), "nohup"); !ok {
		t.Fatalf("no leader key:\n%s", p.out)
	}
	line := strings.TrimSpace(readFileT(t, status))
	mask, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(line, "SigIgn:")), 16, 64)
	if err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	for _, s := range []syscall.Signal{syscall.SIGHUP, syscall.SIGINT} {
		if mask&(1<<(uint(s)-1)) == 0 {
			t.Errorf("fencectl started with %v ignored; CMD started with it not ignored (%s)", s, line)
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
		t.Errorf("SIGHUP to a fencectl started with SIGHUP ignored (nohup): fencectl exited %d and the leadership ended\n%s", p.code, p.out)
	case <-time.After(time.Second):
	}
}
