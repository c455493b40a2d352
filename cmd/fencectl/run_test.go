package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runArgs are the flags every run test passes: the package's etcd, a
// prefix of the test's own, short timeouts.
func runArgs(t *testing.T, extra ...string) []string {
	t.Helper()
	return append([]string{"run", "--etcd-endpoints=" + etcdURL, "--election-prefix=" + testPrefix(t), "--command-timeout=2s"}, extra...)
}

// The child finds the fence, the token (its own key's create revision),
// PGOPTIONS and fencegate's address in its environment, and not fencectl's
// secrets; when it exits 0, fencectl resigns and exits 0.
func TestRunChildEnvironment(t *testing.T) {
	c := newClient(t)
	dir := t.TempDir()
	envFile, goFile := filepath.Join(dir, "env"), filepath.Join(dir, "go")
	p := startFencectl(t, []string{"FENCECTL_TOKEN=bearer-secret", "PGOPTIONS=-c work_mem=64MB", "OUT=" + envFile, "GO=" + goFile},
		runArgs(t, "--election=jobs", "--endpoint=http://127.0.0.1:7999", "--ttl=5s", "--",
			"sh", "-c", `env > "$OUT.tmp" && mv "$OUT.tmp" "$OUT"; while [ ! -e "$GO" ]; do sleep 0.02; done`)...)
	waitFor(t, "the child's environment", func() bool { return exists(envFile) || p.exited() })
	if p.exited() {
		t.Fatalf("fencectl exited early (%d):\n%s", p.code, p.out)
	}
	env := readEnvFile(t, envFile)
	key, rev, lease, ok := leaderKey(t, c, testPrefix(t), "jobs")
	if !ok {
		t.Fatalf("no leader key in etcd while the child runs")
	}
	tok := strconv.FormatInt(rev, 10)
	for _, tc := range []struct{ name, want string }{
		{"FENCEGATE_TOKEN", tok},
		{"FENCEGATE_FENCE", "jobs"},
		{"FENCEGATE_ELECTION", "jobs"},
		{"FENCEGATE_HTTP_ADDR", "http://127.0.0.1:7999"},
		{"PGOPTIONS", "-c work_mem=64MB -c fencegate.fence=jobs -c fencegate.token=" + tok},
		{"FENCECTL_TOKEN", ""},
	} {
		if got := env[tc.name]; got != tc.want {
			t.Errorf("child's %s: got %q, want %q (leader key %s)", tc.name, got, tc.want, key)
		}
	}
	if err := os.WriteFile(goFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := p.wait(t); got != 0 {
		t.Errorf("fencectl exit status: got %d, want 0\n%s", got, p.out)
	}
	if n := candidates(t, c, testPrefix(t), "jobs"); n != 0 {
		t.Errorf("candidate keys after the child exited: got %d, want 0 (resigned)", n)
	}
	ttl, err := c.TimeToLive(t.Context(), lease)
	if err != nil {
		t.Fatalf("TimeToLive: %v", err)
	}
	if ttl.TTL != -1 {
		t.Errorf("lease TTL after resigning: got %d, want -1 (revoked)", ttl.TTL)
	}
}

// A second `run` of the same election waits, its key in place, until the
// first one's child exits; its token is then higher.
func TestRunSecondWaitsForFirst(t *testing.T) {
	c := newClient(t)
	dir := t.TempDir()
	script := `echo "$FENCEGATE_TOKEN" > "$OUT.tmp" && mv "$OUT.tmp" "$OUT"; while [ ! -e "$GO" ]; do sleep 0.02; done`
	out1, go1 := filepath.Join(dir, "tok1"), filepath.Join(dir, "go1")
	out2, go2 := filepath.Join(dir, "tok2"), filepath.Join(dir, "go2")
	p1 := startFencectl(t, []string{"OUT=" + out1, "GO=" + go1}, runArgs(t, "--election=e", "--", "sh", "-c", script)...)
	waitFor(t, "the first child", func() bool { return wroteLine(out1) || p1.exited() })
	p2 := startFencectl(t, []string{"OUT=" + out2, "GO=" + go2}, runArgs(t, "--election=e", "--", "sh", "-c", script)...)
	waitFor(t, "the second candidate's key", func() bool { return candidates(t, c, testPrefix(t), "e") == 2 || p2.exited() })
	if exists(out2) || p2.exited() {
		t.Fatalf("the second run started its child (or exited) while the first holds the election:\n%s", p2.out)
	}
	if err := os.WriteFile(go1, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := p1.wait(t); got != 0 {
		t.Fatalf("first fencectl: got status %d, want 0\n%s", got, p1.out)
	}
	waitFor(t, "the second child", func() bool { return wroteLine(out2) || p2.exited() })
	if err := os.WriteFile(go2, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := p2.wait(t); got != 0 {
		t.Fatalf("second fencectl: got status %d, want 0\n%s", got, p2.out)
	}
	t1, t2 := lastInt(t, out1), lastInt(t, out2)
	if t2 <= t1 {
		t.Errorf("tokens: got first %d, second %d; want the second higher", t1, t2)
	}
}

// fencectl exits with the child's status, 128+n for a death by signal n,
// and resigns in every case.
func TestRunPropagatesExitStatus(t *testing.T) {
	c := newClient(t)
	for _, tc := range []struct {
		name string
		cmd  []string
		want int
	}{
		{"success", []string{"sh", "-c", "exit 0"}, 0},
		{"failure", []string{"sh", "-c", "exit 3"}, 3},
		{"SIGKILL", []string{"sh", "-c", "kill -KILL $$"}, 128 + 9},
		{"SIGTERM", []string{"sh", "-c", "kill -TERM $$"}, 128 + 15},
		{"not found", []string{"/nonexistent/worker"}, 127},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startFencectl(t, nil, runArgs(t, append([]string{"--election=x", "--"}, tc.cmd...)...)...)
			if got := p.wait(t); got != tc.want {
				t.Errorf("exit status: got %d, want %d\n%s", got, tc.want, p.out)
			}
			if n := candidates(t, c, testPrefix(t), "x"); n != 0 {
				t.Errorf("candidate keys after exit: got %d, want 0", n)
			}
		})
	}
}

// SIGTERM to fencectl reaches the child, whose status fencectl exits with.
func TestRunForwardsSignals(t *testing.T) {
	dir := t.TempDir()
	ready, got := filepath.Join(dir, "ready"), filepath.Join(dir, "got")
	p := startFencectl(t, []string{"READY=" + ready, "GOT=" + got},
		runArgs(t, "--election=s", "--", "sh", "-c", `trap 'echo TERM > "$GOT"; exit 7' TERM; touch "$READY"; while :; do sleep 0.02; done`)...)
	waitFor(t, "the child", func() bool { return exists(ready) || p.exited() })
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 7 {
		t.Errorf("exit status: got %d, want 7 (the child's)\n%s", code, p.out)
	}
	if !exists(got) {
		t.Errorf("the child did not get SIGTERM")
	}
}

// Deleting the leader's key ends the leadership: the child gets SIGTERM,
// and fencectl says why and fails even though the child exited 0.
func TestRunKeyDeletedStopsChild(t *testing.T) {
	c := newClient(t)
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	p := startFencectl(t, []string{"READY=" + ready},
		runArgs(t, "--election=d", "--", "sh", "-c", `trap 'exit 0' TERM; touch "$READY"; while :; do sleep 0.02; done`)...)
	waitFor(t, "the child", func() bool { return exists(ready) || p.exited() })
	key, _, _, ok := leaderKey(t, c, testPrefix(t), "d")
	if !ok {
		t.Fatal("no leader key")
	}
	if _, err := c.Delete(t.Context(), key); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 1 {
		t.Errorf("exit status: got %d, want 1\n%s", code, p.out)
	}
	if out := p.out.String(); !strings.Contains(out, "leadership key deleted") {
		t.Errorf("output: got %q, want the cause (leadership key deleted)", out)
	}
}

// The safety property: fencectl cut off from etcd kills a child that
// ignores SIGTERM before the lease can have expired in etcd. The lease's
// expiry is learned from etcd itself: polled every 20ms with TimeToLive,
// each answer proves the lease lives at least until the poll's send time
// plus the whole seconds it reports; the latest such time is a lower bound
// of the expiry, within about a poll interval of it. The child's last
// write must come before it. --grace is longer than the TTL: a SIGKILL
// counted from when the loss is noticed would come after the expiry
// whenever the partition starts.
func TestRunPartitionedKillsChildBeforeLeaseExpiry(t *testing.T) {
	c := newClient(t)
	proxy := newProxy(t, strings.TrimPrefix(etcdURL, "http://"))
	out := filepath.Join(t.TempDir(), "writes")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := startFencectl(t, []string{childEnvVar + "=writer", "OUT=" + out},
		"run", "--etcd-endpoints="+proxy.Addr(), "--election-prefix="+testPrefix(t), "--command-timeout=1s",
		"--election=p", "--ttl=3s", "--grace=5s", "--kill-margin=500ms", "--", self)
	waitFor(t, "the child's first write", func() bool { return wroteLine(out) || p.exited() })
	_, _, lease, ok := leaderKey(t, c, testPrefix(t), "p")
	if !ok {
		t.Fatalf("no leader key:\n%s", p.out)
	}

	var expiresAfter time.Time // lower bound of the lease's expiry in etcd
	poll := func() bool {
		sent := time.Now()
		r, err := c.TimeToLive(t.Context(), lease)
		if err != nil {
			t.Fatalf("TimeToLive: %v", err)
		}
		if r.TTL < 0 {
			return false
		}
		if b := sent.Add(time.Duration(r.TTL) * time.Second); b.After(expiresAfter) {
			expiresAfter = b
		}
		return true
	}
	// Keep-alives flow for a while, then the partition.
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		poll()
	}
	proxy.Cut()
	for deadline := time.Now().Add(15 * time.Second); poll(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the lease did not expire within 15s of the partition")
		}
	}
	if code := p.wait(t); code != 128+9 {
		t.Errorf("exit status: got %d, want %d (SIGKILL: the child ignores SIGTERM)\n%s", code, 128+9, p.out)
	}
	last := time.Unix(0, lastInt(t, out))
	t.Logf("last write %v before the lease's earliest expiry", expiresAfter.Sub(last).Round(time.Millisecond))
	if !last.Before(expiresAfter) {
		t.Errorf("the child wrote at %v, %v after the lease could have expired (%v)\n%s",
			last.Format(time.StampMilli), last.Sub(expiresAfter), expiresAfter.Format(time.StampMilli), p.out)
	}
}

// A fencectl frozen (SIGSTOP) past its lease cannot kill anything while
// frozen, and its child keeps writing: that is what fencing in fencegate
// is for. Thawed, it must not grant --grace again: the deadline is long
// past, so the child gets SIGKILL at once.
func TestRunFrozenKillsAtOnceWhenThawed(t *testing.T) {
	c := newClient(t)
	out := filepath.Join(t.TempDir(), "writes")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := startFencectl(t, []string{childEnvVar + "=writer", "OUT=" + out},
		runArgs(t, "--election=f", "--ttl=2s", "--grace=10s", "--kill-margin=500ms", "--", self)...)
	waitFor(t, "the child's first write", func() bool { return wroteLine(out) || p.exited() })
	_, _, lease, ok := leaderKey(t, c, testPrefix(t), "f")
	if !ok {
		t.Fatalf("no leader key:\n%s", p.out)
	}
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the lease to expire", func() bool {
		r, err := c.TimeToLive(t.Context(), lease)
		return err == nil && r.TTL < 0
	})
	expired := time.Now()
	waitFor(t, "a write after the expiry", func() bool { return lastInt(t, out) > expired.UnixNano() })
	thawed := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 128+9 {
		t.Errorf("exit status: got %d, want %d\n%s", code, 128+9, p.out)
	}
	last := time.Unix(0, lastInt(t, out))
	if d := last.Sub(thawed); d > time.Second {
		t.Errorf("the child wrote %v after the thaw, want it killed at once (--grace is 10s)\n%s", d, p.out)
	}
}

// What the child leaves behind holds its token too: when the child exits,
// the rest of its process group is killed. And when fencectl itself is
// killed, the kernel kills the child.
func TestRunLeavesNoProcessBehind(t *testing.T) {
	for _, tc := range []struct {
		name string
		// The process to outlive its parent has no stdout or stderr of
		// the test's: it would hold the test's pipes open.
		script string
		kill   bool // SIGKILL fencectl once the pid file is written
	}{
		{"child exits, its background job remains", `sleep 600 >/dev/null 2>&1 & echo $! > "$PIDFILE.tmp"; mv "$PIDFILE.tmp" "$PIDFILE"; exit 0`, false},
		{"fencectl killed", `echo $$ > "$PIDFILE.tmp"; mv "$PIDFILE.tmp" "$PIDFILE"; exec sleep 600 >/dev/null 2>&1`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "pid")
			p := startFencectl(t, []string{"PIDFILE=" + pidFile}, runArgs(t, "--election=l", "--", "sh", "-c", tc.script)...)
			waitFor(t, "the pid file", func() bool { return exists(pidFile) || p.exited() })
			pid, err := strconv.Atoi(strings.TrimSpace(readFileT(t, pidFile)))
			if err != nil {
				t.Fatalf("pid file: %v", err)
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
			waitFor(t, fmt.Sprintf("process %d to die", pid), func() bool { return !alive(pid) })
		})
	}
}

// alive reports whether pid is a live process (not gone, not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
