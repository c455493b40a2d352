package main

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// rt19ChildEnv makes the test binary a "zombie leader" child: a process
// whose main thread exits while another thread keeps writing. It is read
// in init, before TestMain, while the main goroutine is still locked to
// the main OS thread.
const rt19ChildEnv = "FENCECTL_RT19_CHILD"

func init() {
	if os.Getenv(rt19ChildEnv) != "zombieleader" {
		return
	}
	rt19ZombieLeader()
}

// rt19ZombieLeader: leaves fencectl's session (setsid, as a daemon does),
// writes its pid to $PIDFILE, then starts a thread that appends the time
// (unix nanoseconds) to $OUT every 10 ms and ends its own main thread
// with exit(2) (not exit_group): the kernel keeps the thread group
// running, and /proc/<pid>/stat shows the group's leader in state Z, as
// for a process that has exited. (A C program calling pthread_exit from
// main does the same.) GC is off so that no stop-the-world waits for the
// gone thread.
func rt19ZombieLeader() {
	debug.SetGCPercent(-1)
	_, _ = syscall.Setsid()
	f, err := os.OpenFile(os.Getenv("OUT"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		os.Exit(3)
	}
	go func() {
		buf := make([]byte, 0, 32)
		for {
			buf = strconv.AppendInt(buf[:0], time.Now().UnixNano(), 10)
			buf = append(buf, '\n')
			_, _ = f.Write(buf)
			time.Sleep(10 * time.Millisecond)
		}
	}()
	pid := os.Getenv("PIDFILE")
	if err := os.WriteFile(pid+".tmp", []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		os.Exit(3)
	}
	if err := os.Rename(pid+".tmp", pid); err != nil {
		os.Exit(3)
	}
	time.Sleep(50 * time.Millisecond) // let the writer run on a thread of its own
	for {
		syscall.RawSyscall(syscall.SYS_EXIT, 0, 0, 0) // this thread only
	}
}

// TestRedTeam19ThreadGroupWithExitedLeaderOutlivesRun
//
// Attack: CMD starts a descendant that leaves fencectl's session (setsid)
// and then ends its main thread only (exit(2), or pthread_exit from main in
// C), while a second thread keeps writing with FENCEGATE_TOKEN. The kernel
// keeps such a process running, but /proc/<pid>/stat shows its leader in
// state Z. fencectl's descendants() (run.go) skips every /proc entry in
// state Z, so the process, and everything below it, is invisible to
// killTree and killAll; being in a session of its own, no signal to CMD's
// process group reaches it either.
//
// What happened (on this code): in both cases, CMD exiting by itself and
// the leadership lost (key deleted) while CMD runs, fencectl resigned and
// exited, and the descendant went on writing with the token after the
// leadership had ended in etcd.
//
// What should happen: README/`fencectl run --help`: "When CMD exits,
// whatever it left is killed (in its process group or not ...)" and on a
// lost leadership "CMD's process group, and every process below fencectl
// that left it, gets SIGTERM, then SIGKILL": nothing fencectl started may
// write once its leadership is over.
func TestRedTeam19ThreadGroupWithExitedLeaderOutlivesRun(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		script   string
		loseLead bool // delete the leader key while CMD still runs
	}{
		{"CMD exits", `"$SELF" </dev/null >/dev/null 2>&1 & while [ ! -e "$PIDFILE" ]; do sleep 0.01; done; sleep 0.2; exit 0`, false},
		{"leadership lost", `"$SELF" </dev/null >/dev/null 2>&1 & while :; do sleep 0.05; done`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t)
			dir := t.TempDir()
			pidFile, out := filepath.Join(dir, "pid"), filepath.Join(dir, "writes")
			p := startFencectl(t, []string{
				"PIDFILE=" + pidFile, "OUT=" + out, "SELF=" + self,
				rt19ChildEnv + "=zombieleader", "GOGC=off", "GOMAXPROCS=4",
			},
				runArgs(t, "--election=zl", "--ttl=2s", "--grace=200ms", "--kill-margin=500ms", "--", "sh", "-c", tc.script)...)
			waitFor(t, "the pid file", func() bool { return exists(pidFile) || p.exited() })
			pid, err := strconv.Atoi(strings.TrimSpace(readFileT(t, pidFile)))
			if err != nil {
				t.Fatalf("pid file: %v\n%s", err, p.out)
			}
			t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
			// The setup: the descendant's leader reads as a zombie while
			// it writes.
			waitFor(t, "the descendant's main thread to exit", func() bool { return !alive(pid) })
			if tc.loseLead {
				key, _, _, ok := leaderKey(t, c, testPrefix(t), "zl")
				if !ok {
					t.Fatalf("no leader key\n%s", p.out)
				}
				if _, err := c.Delete(t.Context(), key); err != nil {
					t.Fatal(err)
				}
			}
			p.wait(t)
			waitFor(t, "the leadership to end in etcd", func() bool {
				_, _, _, ok := leaderKey(t, c, testPrefix(t), "zl")
				return !ok
			})
			ended := time.Now()
			time.Sleep(500 * time.Millisecond)
			if last := time.Unix(0, lastInt(t, out)); last.After(ended) {
				// The leader's own environ is gone with its thread; a live
				// thread's is not.
				env, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(rt19LiveThread(pid)) + "/environ")
				tok := ""
				for _, kv := range strings.Split(string(env), "\x00") {
					if strings.HasPrefix(kv, "FENCEGATE_TOKEN=") {
						tok = kv
					}
				}
				t.Errorf("process %d (%s), started by CMD, wrote %v after fencectl exited and the leadership had ended in etcd: fencectl never saw it (its main thread exited, /proc shows it as a zombie)\n%s",
					pid, tok, last.Sub(ended).Round(time.Millisecond), p.out)
			}
		})
	}
}

// rt19LiveThread is a thread of pid other than its leader, 0 if none.
func rt19LiveThread(pid int) int {
	entries, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	for _, e := range entries {
		if tid, err := strconv.Atoi(e.Name()); err == nil && tid != pid {
			return tid
		}
	}
	return 0
}
