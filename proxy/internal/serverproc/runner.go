package serverproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/election/freeport"
)

// Config configures a Runner.
type Config struct {
	// Name prefixes the Runner's own errors, "throwaway postgres" say.
	Name string
	// Port is the TCP port on 127.0.0.1; 0 picks a free one, and a start
	// that fails moves to another free port (three tries in all).
	Port int
	// StartTimeout bounds each start, in addition to its ctx.
	StartTimeout time.Duration
	// StopSignal asks the server to shut down.
	StopSignal syscall.Signal
	// TempDir, if set, is removed by Stop and Close, and by Start when
	// it fails.
	TempDir string
	// Run starts the server on port and waits until it is ready. Its
	// errors are returned as they are.
	Run func(ctx context.Context, port int) (*Process, error)
}

// Runner keeps at most one run of a server at a time. Its methods are safe
// for concurrent use.
type Runner struct {
	cfg Config

	mu      sync.Mutex
	port    int
	proc    *Process // nil while stopped
	closed  bool
	tempDir string
}

// NewRunner returns a Runner for cfg; nothing runs until Start.
func NewRunner(cfg Config) *Runner {
	return &Runner{cfg: cfg, port: cfg.Port, tempDir: cfg.TempDir}
}

// Start starts the server. If it fails, the temporary directory is removed.
func (r *Runner) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.startLocked(ctx, false); err != nil {
		_ = r.removeTemp()
		return err
	}
	return nil
}

// startLocked starts the server; with samePort it never moves to another
// port.
func (r *Runner) startLocked(ctx context.Context, samePort bool) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.StartTimeout)
	defer cancel()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		if r.port == 0 || (!samePort && r.cfg.Port == 0 && attempt > 0) {
			p, err := r.freePort()
			if err != nil {
				return err
			}
			r.port = p
		}
		var p *Process
		p, lastErr = r.cfg.Run(ctx, r.port)
		if lastErr == nil {
			r.proc = p
			return nil
		}
		if ctx.Err() != nil || samePort || r.cfg.Port != 0 {
			// A fixed port that is taken will stay taken.
			break
		}
	}
	return lastErr
}

func (r *Runner) freePort() (int, error) {
	// Below the kernel's ephemeral range: Restart binds the same port
	// again, and while the server is down a port of that range can become
	// the local port of any outgoing connection (a chaos campaign's
	// gateways open hundreds a second); the server could not come back.
	p, err := freeport.Port()
	if err != nil {
		err = fmt.Errorf("%s: find a free port: %w", r.cfg.Name, err)
	}
	return p, err
}

// Port returns the TCP port the server listens on (on 127.0.0.1).
func (r *Runner) Port() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.port
}

// PID returns the server's process id, or 0 while stopped.
func (r *Runner) PID() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil {
		return 0
	}
	return r.proc.PID()
}

// Kill kills the server's process group with SIGKILL and waits for the
// server to exit. It never fails; the error is for the callers' APIs.
func (r *Runner) Kill() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil {
		return nil
	}
	r.proc.Kill()
	r.proc = nil
	return nil
}

// Restart stops the server if it runs and starts it again on the same port.
// If ctx ends before the old server has stopped, it is killed.
func (r *Runner) Restart(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errors.New(r.cfg.Name + ": restart after close")
	}
	if err := r.stopLocked(ctx.Done(), ctx.Err); err != nil {
		return err
	}
	return r.startLocked(ctx, true)
}

// Stop stops the server with StopSignal, killing it if abort is closed
// first (the error then wraps cause()), and removes the temporary
// directory. After Stop, Restart fails. Stop is idempotent.
func (r *Runner) Stop(abort <-chan struct{}, cause func() error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	err := r.stopLocked(abort, cause)
	r.closed = true
	if rmErr := r.removeTemp(); err == nil {
		err = rmErr
	}
	return err
}

// Close is Stop with a limit of d on the shutdown, after which the server
// is killed.
func (r *Runner) Close(d time.Duration) error {
	abort := make(chan struct{})
	t := time.AfterFunc(d, func() { close(abort) })
	defer t.Stop()
	return r.Stop(abort, func() error { return fmt.Errorf("shutdown took over %v", d) })
}

func (r *Runner) stopLocked(abort <-chan struct{}, cause func() error) error {
	p := r.proc
	if p == nil {
		return nil
	}
	r.proc = nil
	if err := p.Stop(r.cfg.StopSignal, abort, cause); err != nil {
		return fmt.Errorf("%s: stop: %w", r.cfg.Name, err)
	}
	return nil
}

func (r *Runner) removeTemp() error {
	if r.tempDir == "" {
		return nil
	}
	dir := r.tempDir
	r.tempDir = ""
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("%s: %w", r.cfg.Name, err)
	}
	return nil
}
