package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestRedTeam21TostopFreezesFencectlAtLoss
//
// Attack: fencectl runs as a background job of an interactive shell on a
// terminal with `stty tostop` (a common setting: background jobs may not
// scribble on the terminal). CMD is quiet (it logs to a file) and ignores
// SIGTERM. The leadership is lost (here: the key is deleted). fencectl
// sends SIGTERM, and then, "signals first, words after", writes why to its
// stderr, the terminal. A background process writing to a TOSTOP terminal
// gets SIGTTOU, whose default action stops it; fencectl neither catches
// nor ignores SIGTTOU (nor SIGTTIN), as it did not SIGTSTP before
// TestRedTeam17SigtstpLeavesChildUnsupervised.
//
// What happened (on this code): fencectl stopped (state T) on its own
// diagnostic, between the SIGTERM and the SIGKILL it owed CMD after
// --grace 200ms. CMD ran on with FENCEGATE_TOKEN, unsupervised, past the
// expiry of the lease in etcd, while the election was free for the next
// leader: two writers of the same fence, one of them with a dead term.
//
// What should happen: fencectl is never stopped by job control (SIGTTOU
// and SIGTTIN caught or ignored, as SIGTSTP now is, or its words written
// after the SIGKILL), and CMD is SIGKILLed --grace after the loss.
//
// Severity: high. The kill that bounds a lost leader is skipped exactly
// when it is due, on an ordinary terminal setting.
func TestRedTeam21TostopFreezesFencectlAtLoss(t *testing.T) {
	c := newClient(t)
	dir := t.TempDir()
	out, pidFile := filepath.Join(dir, "writes"), filepath.Join(dir, "fencectl.pid")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}

	master, slave := rt21OpenPty(t)
	tio, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	tio.Lflag |= unix.TOSTOP
	if err := unix.IoctlSetTermios(int(slave.Fd()), unix.TCSETS, tio); err != nil {
		t.Fatal(err)
	}
	var term syncBuffer
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			_, _ = term.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()

	// A shell with job control that stays, as an interactive one does,
	// the pty its terminal; fencectl is its background job.
	args := runArgs(t, "--election=tty", "--ttl=2s", "--grace=200ms", "--kill-margin=500ms", "--", self)
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = "'" + a + "'"
	}
	shell := exec.Command("bash", "-m", "-c",
		fmt.Sprintf(`"$FENCECTL" %s </dev/null & echo $! > "$PIDFILE"; while :; do sleep 0.1; done`, strings.Join(quoted, " ")))
	shell.Env = append(os.Environ(), "FENCECTL="+binPath, "PIDFILE="+pidFile, childEnvVar+"=writer", "OUT="+out)
	shell.Stdin, shell.Stdout, shell.Stderr = slave, slave, slave
	shell.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Pdeathsig: syscall.SIGKILL}
	if err := shell.Start(); err != nil {
		t.Fatal(err)
	}
	shellDone := make(chan struct{})
	go func() { _ = shell.Wait(); close(shellDone) }()
	var fpid int
	t.Cleanup(func() {
		if fpid > 0 {
			_ = syscall.Kill(fpid, syscall.SIGKILL) // Pdeathsig takes CMD
		}
		_ = shell.Process.Kill()
		<-shellDone
		slave.Close()
		master.Close()
		<-drained
	})

	waitFor(t, "the worker's first write", func() bool { return wroteLine(out) && exists(pidFile) })
	fpid, err = strconv.Atoi(strings.TrimSpace(readFileT(t, pidFile)))
	if err != nil {
		t.Fatal(err)
	}
	key, _, lease, ok := leaderKey(t, c, testPrefix(t), "tty")
	if !ok {
		t.Fatalf("no leader key; terminal:\n%s", term.String())
	}
	if _, err := c.Delete(t.Context(), key); err != nil {
		t.Fatal(err)
	}
	lost := time.Now()
	waitFor(t, "the lease to end in etcd", func() bool {
		r, err := c.TimeToLive(t.Context(), lease)
		return err == nil && r.TTL < 0
	})
	ended := time.Now()
	time.Sleep(500 * time.Millisecond)
	if last := time.Unix(0, lastInt(t, out)); last.After(ended) {
		t.Errorf("leadership lost (key deleted) %v ago, --grace 200ms: CMD, which ignores SIGTERM, still writes, %v after its lease ended in etcd; fencectl (pid %d) is in state %q\nterminal:\n%s",
			time.Since(lost).Round(time.Millisecond), last.Sub(ended).Round(time.Millisecond), fpid, rt21State(fpid), term.String())
	}
}

// rt21OpenPty opens a new pseudo-terminal pair.
func rt21OpenPty(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Through SyscallConn, not Fd: Fd would make reads block a thread
	// that Close cannot wake.
	rc, err := m.SyscallConn()
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	var n int
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		if ierr = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); ierr == nil {
			n, ierr = unix.IoctlGetInt(int(fd), unix.TIOCGPTN)
		}
	}); err != nil || ierr != nil {
		m.Close()
		t.Fatal(err, ierr)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	return m, s
}

// rt21State is the state letter of process pid in /proc, "" if gone.
func rt21State(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}
