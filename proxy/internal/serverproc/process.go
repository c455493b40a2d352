package serverproc

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"time"
)

// Process is one run of a server started by Start.
type Process struct {
	cmd  *exec.Cmd
	log  *LogWriter
	done chan struct{} // closed when the child has exited
	err  error         // its exit status, set before done is closed
}

// Start starts cmd with its stdout and stderr going to log. cmd should set
// SysProcAttr.Setpgid so that Kill and Stop reach the server's children too;
// it should not be built with exec.CommandContext, since a start's context
// does not bound the server's life.
func Start(cmd *exec.Cmd, log *LogWriter) (*Process, error) {
	cmd.Stdout, cmd.Stderr = log, log
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Process{cmd: cmd, log: log, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// WaitReady waits until the ready line is logged. If the child exits first it
// returns an error with the exit status; if ctx ends first it kills the
// child and returns an error wrapping ctx.Err().
func (p *Process) WaitReady(ctx context.Context) error {
	select {
	case <-p.log.Ready():
		return nil
	case <-p.done:
		if p.err == nil {
			return errors.New("server exited during start (exit status 0)")
		}
		return fmt.Errorf("server exited during start (%w)", p.err)
	case <-ctx.Done():
		p.Kill()
		return fmt.Errorf("server not ready: %w", ctx.Err())
	}
}

// Log returns the LogWriter the child writes to.
func (p *Process) Log() *LogWriter { return p.log }

// PID returns the child's process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Kill sends SIGKILL to the child's process group, as a crash would, and
// waits for the child to exit.
func (p *Process) Kill() {
	_ = syscall.Kill(-p.PID(), syscall.SIGKILL)
	<-p.done
}

// Stop sends sig to the child and waits for it to exit; then it kills what
// is left of its process group. If abort is closed first it kills the group
// at once and returns cause() wrapped, marked "(killed)".
func (p *Process) Stop(sig syscall.Signal, abort <-chan struct{}, cause func() error) error {
	pid := p.PID()
	if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	select {
	case <-p.done:
	case <-abort:
		p.Kill()
		return fmt.Errorf("%w (killed)", cause())
	}
	// Children have exited with the server; make sure of it.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	return nil
}
