package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// child is a process the orchestrator runs, restarts and hurts: an etcd
// member, a fencegate replica or a worker. Each runs in its own process
// group (signals reach everything it started) and dies with the
// orchestrator (Pdeathsig).
type child struct {
	name string
	path string
	args func() []string // evaluated at each start
	log  string          // stdout and stderr are appended here

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	stopped bool // SIGSTOPped and not yet continued
	starts  int
}

func (c *child) start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd != nil {
		select {
		case <-c.done:
		default:
			return fmt.Errorf("%s: already running", c.name)
		}
	}
	f, err := os.OpenFile(c.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.path, c.args()...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	fmt.Fprintf(f, "=== fencechaos: start %d of %s at %s\n", c.starts, c.name, time.Now().Format(time.RFC3339Nano))
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", c.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(done)
	}()
	c.cmd, c.done, c.stopped = cmd, done, false
	c.starts++
	return nil
}

// running reports whether the process is alive (stopped counts as alive).
func (c *child) running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runningLocked()
}

func (c *child) runningLocked() bool {
	if c.cmd == nil {
		return false
	}
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// signal sends sig to the child's process group.
func (c *child) signal(sig syscall.Signal) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.runningLocked() {
		return fmt.Errorf("%s: not running", c.name)
	}
	if err := syscall.Kill(-c.cmd.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("%s: %v: %w", c.name, sig, err)
	}
	switch sig {
	case syscall.SIGSTOP:
		c.stopped = true
	case syscall.SIGCONT:
		c.stopped = false
	}
	return nil
}

// kill kills the process group and waits for the child to exit.
func (c *child) kill() {
	c.mu.Lock()
	if !c.runningLocked() {
		c.mu.Unlock()
		return
	}
	pid, done := c.cmd.Process.Pid, c.done
	c.mu.Unlock()
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(-pid, syscall.SIGCONT)
	<-done
}

// stop asks the child to exit with SIGTERM and kills it after grace.
func (c *child) stop(grace time.Duration) {
	c.mu.Lock()
	if !c.runningLocked() {
		c.mu.Unlock()
		return
	}
	pid, done := c.cmd.Process.Pid, c.done
	c.mu.Unlock()
	_ = syscall.Kill(-pid, syscall.SIGCONT)
	_ = syscall.Kill(pid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
	}
	// Whatever it left in its group goes too.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	<-done
}

// exited describes a child that exited on its own, as name: the last line
// it logged (most often why: a flag refused, a port taken) and where the
// whole log is, so the reason shows in CI's output too.
func (c *child) exited(name string) string {
	if line := lastLine(c.log); line != "" {
		return fmt.Sprintf("%s exited: %q (see %s)", name, line, c.log)
	}
	return fmt.Sprintf("%s exited (see %s)", name, c.log)
}

// lastLine returns the last non-empty line of the file at path, at most
// 300 bytes of it, or "" if there is none or it cannot be read.
func lastLine(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const tail = 4096
	buf := make([]byte, tail)
	off := int64(0)
	if st, err := f.Stat(); err == nil && st.Size() > tail {
		off = st.Size() - tail
	}
	n, _ := f.ReadAt(buf, off)
	lines := strings.Split(string(buf[:n]), "\n")
	line := ""
	for i := len(lines) - 1; i >= 0 && line == ""; i-- {
		line = strings.TrimSpace(lines[i])
	}
	if len(line) > 300 {
		line = strings.ToValidUTF8(line[:300], "") + "…"
	}
	return line
}
