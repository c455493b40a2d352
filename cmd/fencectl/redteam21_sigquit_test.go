package main

import (
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestRedTeam21CatchableSignalLeavesWorkerTree
//
// Attack: `fencectl run` catches SIGINT, SIGTERM, SIGHUP, SIGTSTP, SIGCONT
// and SIGPIPE, and nothing else. The catchable signals for which the Go
// runtime's default is to exit with a goroutine dump keep that default:
// SIGQUIT (Ctrl-\ on the terminal, which reaches only fencectl's process
// group, not CMD's, as CMD runs in a group of its own) and SIGABRT (what
// systemd sends the main process, fencectl, when WatchdogSec= or
// TimeoutStopFailureMode=abort fires). The test sends each to a leading
// fencectl whose CMD runs a worker loop in CMD's process group (an
// ordinary `cmd &` of a shell).
//
// What happened (on this code): fencectl died on the spot: no SIGTERM or
// SIGKILL to CMD's group, no resign. The kernel SIGKILLs CMD itself
// (Pdeathsig), but the worker it started goes on writing with
// FENCEGATE_TOKEN after the lease has expired in etcd and a next leader
// may be elected; the exit status is 2 (`fencectl run --help`: "2 for a
// mistake on the command line"), with a goroutine dump on stderr.
//
// What should happen: these signals can be caught, as SIGTSTP now is
// (TestRedTeam17SigtstpLeavesChildUnsupervised): fencectl forwards them
// to CMD's group like SIGTERM (or at least stops CMD's whole tree and
// resigns before it exits), and nothing it started writes after the
// leadership is over. The "if fencectl dies" caveat is for SIGKILL, not
// for a signal fencectl chose not to handle.
//
// Severity: high. A keystroke or a routine log-rotation signal leaves a
// writer with a dead term's token running unsupervised; only fencegate's
// check stands between it and the data.
func TestRedTeam21CatchableSignalLeavesWorkerTree(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGQUIT, syscall.SIGABRT} {
		t.Run(unix.SignalName(sig), func(t *testing.T) {
			c := newClient(t)
			dir := t.TempDir()
			out, pidFile := filepath.Join(dir, "writes"), filepath.Join(dir, "pid")
			// The worker: a plain shell loop in CMD's process group that
			// stops by itself once the test's directory is gone.
			worker := `( while [ -d "$DIR" ]; do date +%s%N >> "$OUT"; sleep 0.01; done ) </dev/null >/dev/null 2>&1 & ` +
				`echo $! > "$PIDFILE.tmp"; mv "$PIDFILE.tmp" "$PIDFILE"; wait`
			p := startFencectl(t, []string{"DIR=" + dir, "OUT=" + out, "PIDFILE=" + pidFile},
				runArgs(t, "--election=q", "--ttl=2s", "--grace=200ms", "--kill-margin=500ms", "--", "sh", "-c", worker)...)
			waitFor(t, "the worker's first write", func() bool { return (wroteLine(out) && exists(pidFile)) || p.exited() })
			pid, err := strconv.Atoi(strings.TrimSpace(readFileT(t, pidFile)))
			if err != nil {
				t.Fatalf("pid file: %v\n%s", err, p.out)
			}
			t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
			if _, _, _, ok := leaderKey(t, c, testPrefix(t), "q"); !ok {
				t.Fatalf("no leader key:\n%s", p.out)
			}
			if err := p.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			code := p.wait(t)
			waitFor(t, "the leadership to end in etcd", func() bool {
				_, _, _, ok := leaderKey(t, c, testPrefix(t), "q")
				return !ok
			})
			ended := time.Now()
			time.Sleep(500 * time.Millisecond)
			first := strings.SplitN(p.out.String(), "\n", 2)[0]
			if last := time.Unix(0, lastInt(t, out)); last.After(ended) {
				t.Errorf("%s to the leading fencectl: it exited %d (%q), and worker %d that CMD started wrote %v after the leadership had ended in etcd",
					unix.SignalName(sig), code, first, pid, last.Sub(ended).Round(time.Millisecond))
			}
			if code == 2 || strings.Contains(p.out.String(), "goroutine ") {
				t.Errorf("%s to the leading fencectl: exit status %d (2 is 'a mistake on the command line'), output starts %q (a Go goroutine dump: %v)",
					unix.SignalName(sig), code, first, strings.Contains(p.out.String(), "goroutine "))
			}
		})
	}
}
