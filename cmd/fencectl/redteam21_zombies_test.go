package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestRedTeam21SubreaperNeverReapsOrphans
//
// Attack: fencectl makes itself a child subreaper (PR_SET_CHILD_SUBREAPER)
// so that what CMD's tree leaves behind is reparented to it, but it only
// ever waits for CMD itself. Every orphan that later exits stays a zombie
// child of fencectl for as long as fencectl runs. A long-running worker
// that starts short helpers the common detached way (`(helper &)`, a
// double fork, `setsid -f`, a daemonizing library) leaves one zombie per
// helper. Here CMD detaches 300 helpers that exit at once, then keeps
// running.
//
// What happened (on this code): 300 zombies whose parent is fencectl, all
// still there after a second; the count only grows. Each holds a pid (and
// a slot of the pids cgroup: systemd's TasksMax=, a container's pids.max),
// and each is read on every /proc scan of killTree and killAll
// (threadsLeft opens /proc/<pid>/status for each Z entry), so the scans
// that must stop a lost leader's tree in time get slower as the worker
// ages. Once the limit is reached the worker cannot fork and fencectl
// cannot start a thread (the Go runtime then dies with "failed to create
// new OS thread", exit 2, leaving CMD's tree to Pdeathsig alone). (A red
// team run that let a forking daemon churn under fencectl exhausted the
// machine's 32768 pids this way in seconds.)
//
// What should happen: a subreaper reaps what it adopts (wait4(-1) with
// WNOHANG on SIGCHLD, minding CMD's own status): no zombie stays below a
// running fencectl.
//
// Severity: medium. Resource exhaustion that grows with the worker's
// uptime and slows the kill path.
func TestRedTeam21SubreaperNeverReapsOrphans(t *testing.T) {
	dir := t.TempDir()
	ready, stop := filepath.Join(dir, "ready"), filepath.Join(dir, "stop")
	p := startFencectl(t, []string{"READY=" + ready, "STOP=" + stop},
		runArgs(t, "--election=zombies", "--ttl=5s", "--", "sh", "-c",
			`i=0; while [ $i -lt 300 ]; do ( true & ); i=$((i+1)); done; touch "$READY"; `+
				`while [ ! -e "$STOP" ]; do sleep 0.05; done`)...)
	waitFor(t, "the helpers", func() bool { return exists(ready) || p.exited() })
	time.Sleep(time.Second)
	n := rt21ZombieChildren(p.cmd.Process.Pid)
	if err := os.WriteFile(stop, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	code := p.wait(t)
	if n > 0 {
		t.Errorf("CMD detached 300 helpers that exited at once; a second later fencectl (pid %d) holds %d zombie children it never reaps (fencectl then exited %d)\n%s",
			p.cmd.Process.Pid, n, code, p.out)
	}
}

// rt21ZombieChildren counts the zombie processes whose parent is ppid.
func rt21ZombieChildren(ppid int) int {
	entries, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) >= 2 && f[0] == "Z" && f[1] == strconv.Itoa(ppid) {
			n++
		}
	}
	return n
}
