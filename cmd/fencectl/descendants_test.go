package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A worker's descendants hold its token (FENCEGATE_TOKEN, PGOPTIONS) as
// much as the worker does: once fencectl has resigned, no process it
// started, directly or not, may be left running with the token, so nothing
// of this leader writes while the next one can. (Fencing in fencegate
// still refuses such a writer once the next leader is known; this checks
// fencectl's own promise.) Found by a red-team review: a process that left
// CMD's process group outlived the leadership. A fencectl that is itself
// SIGKILLed kills only CMD (PR_SET_PDEATHSIG); README says so.
func TestRunKillsDescendants(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script string
		kill   bool // SIGKILL fencectl once the pid file is written
	}{
		{
			// setsid: a new session and process group, which the kill of
			// CMD's group does not reach; its parent exits, so it becomes
			// fencectl's child (a subreaper), not init's.
			"grandchild in a session of its own, child exits",
			`setsid sh -c 'echo $$ > "$PIDFILE.tmp"; mv "$PIDFILE.tmp" "$PIDFILE"; exec sleep 600' </dev/null >/dev/null 2>&1 & ` +
				`while [ ! -e "$PIDFILE" ]; do sleep 0.01; done; exit 0`,
			false,
		},
		{
			// The same, its parent still running when CMD exits: found
			// below fencectl through its parent.
			"grandchild in a session of its own, its parent alive",
			`sh -c 'setsid sh -c '"'"'echo $$ > "$PIDFILE.tmp"; mv "$PIDFILE.tmp" "$PIDFILE"; exec sleep 600'"'"' </dev/null >/dev/null 2>&1 & exec sleep 600' </dev/null >/dev/null 2>&1 & ` +
				`while [ ! -e "$PIDFILE" ]; do sleep 0.01; done; exit 0`,
			false,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t)
			pidFile := filepath.Join(t.TempDir(), "pid")
			p := startFencectl(t, []string{"PIDFILE=" + pidFile}, runArgs(t, "--election=rt", "--ttl=2s", "--", "sh", "-c", tc.script)...)
			waitFor(t, "the pid file", func() bool { return exists(pidFile) || p.exited() })
			pid, err := strconv.Atoi(strings.TrimSpace(readFileT(t, pidFile)))
			if err != nil {
				t.Fatalf("pid file: %v\n%s", err, p.out)
			}
			t.Cleanup(func() {
				if alive(pid) {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			})
			if tc.kill {
				if err := p.cmd.Process.Kill(); err != nil {
					t.Fatal(err)
				}
			}
			p.wait(t)
			// Once the leadership is gone in etcd (resigned, or the
			// lease of a killed fencectl expired), the next leader may
			// write: the descendant must be dead by then.
			waitFor(t, "the leadership to end in etcd", func() bool {
				_, _, _, ok := leaderKey(t, c, testPrefix(t), "rt")
				return !ok
			})
			time.Sleep(100 * time.Millisecond)
			env, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
			if alive(pid) {
				tok := ""
				for _, kv := range strings.Split(string(env), "\x00") {
					if strings.HasPrefix(kv, "FENCEGATE_TOKEN=") {
						tok = kv
					}
				}
				t.Errorf("process %d (%s) still runs after the leadership ended in etcd: a next leader can now be elected while it holds the token\n%s", pid, tok, p.out)
			}
		})
	}
}
