package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRedTeam7SigtermKeepsLeadershipWhileChildStops: README says SIGINT,
// SIGTERM and SIGHUP sent to fencectl once leader are forwarded to CMD.
// Forwarding means fencectl goes on leading while CMD shuts down
// gracefully: its keep-alives go on, and once CMD has exited it resigns
// (the key is deleted at once, so the next leader need not wait out the
// TTL). A CMD that needs longer than the TTL to stop must not be SIGKILLed
// with "lease not proven alive" when etcd was answering all along.
func TestRedTeam7SigtermKeepsLeadershipWhileChildStops(t *testing.T) {
	c := newClient(t)
	dir := t.TempDir()
	ready, done := filepath.Join(dir, "ready"), filepath.Join(dir, "done")
	// On SIGTERM the child takes 3s (more than the 2s TTL) to stop
	// cleanly, then exits 0.
	p := startFencectl(t, []string{"READY=" + ready, "DONE=" + done},
		runArgs(t, "--election=g", "--ttl=2s", "--grace=200ms", "--kill-margin=500ms", "--", "sh", "-c",
			`trap 'sleep 3; touch "$DONE"; exit 0' TERM; touch "$READY"; while :; do sleep 0.02; done`)...)
	waitFor(t, "the child", func() bool { return exists(ready) || p.exited() })
	_, _, lease, ok := leaderKey(t, c, testPrefix(t), "g")
	if !ok {
		t.Fatalf("no leader key:\n%s", p.out)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code := p.wait(t)
	exitedAt := time.Now()
	out := p.out.String()
	if code != 0 || !exists(done) {
		t.Errorf("SIGTERM forwarded, child stopping cleanly in 3s with etcd up: got exit status %d, child finished %v; want 0 and finished\n%s",
			code, exists(done), out)
	}
	if strings.Contains(out, "not proven alive") || strings.Contains(out, "resign") {
		t.Errorf("fencectl output blames etcd or failed to resign although etcd answered throughout:\n%s", out)
	}
	if n := candidates(t, c, testPrefix(t), "g"); n != 0 {
		r, _ := c.TimeToLive(t.Context(), lease)
		t.Errorf("%v after fencectl exited: %d candidate key(s) left (lease TTL %d): not resigned, the next leader waits for the lease to expire",
			time.Since(exitedAt).Round(time.Millisecond), n, r.TTL)
	}
}

// TestRedTeam7SigtermQuickChildResigns: the plain case of the above, a
// child that exits at once on SIGTERM: fencectl must still resign (delete
// its key, revoke its lease) before it exits.
func TestRedTeam7SigtermQuickChildResigns(t *testing.T) {
	c := newClient(t)
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	p := startFencectl(t, []string{"READY=" + ready},
		runArgs(t, "--election=q", "--ttl=5s", "--", "sh", "-c",
			`trap 'exit 0' TERM INT; touch "$READY"; while :; do sleep 0.02; done`)...)
	waitFor(t, "the child", func() bool { return exists(ready) || p.exited() })
	_, _, lease, ok := leaderKey(t, c, testPrefix(t), "q")
	if !ok {
		t.Fatalf("no leader key:\n%s", p.out)
	}
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	code := p.wait(t)
	if n := candidates(t, c, testPrefix(t), "q"); n != 0 {
		r, _ := c.TimeToLive(t.Context(), lease)
		t.Errorf("after SIGINT and a clean child exit (status %d): %d candidate key(s) left, lease TTL %ds: fencectl did not resign\n%s",
			code, n, r.TTL, p.out)
	}
}

// TestRedTeam7SigtermWhileCampaigning: a fencectl waiting for another
// leader and told to stop must not start its child, must take its key
// out (so it never becomes leader), and exits 128+15.
func TestRedTeam7SigtermWhileCampaigning(t *testing.T) {
	c := newClient(t)
	dir := t.TempDir()
	ready1, ran2, go1 := filepath.Join(dir, "ready1"), filepath.Join(dir, "ran2"), filepath.Join(dir, "go1")
	p1 := startFencectl(t, []string{"READY=" + ready1, "GO=" + go1},
		runArgs(t, "--election=w", "--", "sh", "-c", `touch "$READY"; while [ ! -e "$GO" ]; do sleep 0.02; done`)...)
	waitFor(t, "the first child", func() bool { return exists(ready1) || p1.exited() })
	p2 := startFencectl(t, []string{"RAN=" + ran2}, runArgs(t, "--election=w", "--", "sh", "-c", `touch "$RAN"`)...)
	waitFor(t, "the second candidate", func() bool { return candidates(t, c, testPrefix(t), "w") == 2 || p2.exited() })
	if err := p2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p2.wait(t); code != 128+15 {
		t.Errorf("interrupted campaign: got exit status %d, want %d\n%s", code, 128+15, p2.out)
	}
	if n := candidates(t, c, testPrefix(t), "w"); n != 1 {
		t.Errorf("after the interrupted campaign: %d candidate keys, want 1 (the first's)", n)
	}
	if err := os.WriteFile(go1, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	p1.wait(t)
	time.Sleep(200 * time.Millisecond)
	if exists(ran2) {
		t.Errorf("the interrupted fencectl's child ran\n%s", p2.out)
	}
}
