package throwaway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrNotFound is returned by Start when redis-server is not installed.
var ErrNotFound = errors.New("throwaway redis: redis-server not found (install Debian package redis-server)")

// readyLine is what redis-server logs once it accepts connections (7.0 ends
// the line there, 7.2 adds the listener type).
const readyLine = "Ready to accept connections"

// Options configure Start. The zero value is ready to use.
type Options struct {
	// Port is the TCP port on 127.0.0.1; 0 picks a free one.
	Port int
	// Dir is the server's working directory. Empty means a new temporary
	// directory, removed by Close; a Dir given here is never removed.
	Dir string
	// Logf, if set, receives the server's log lines.
	Logf func(format string, args ...any)
	// StartTimeout bounds how long Start and Restart wait for the server to
	// answer, in addition to ctx. Zero means 10s.
	StartTimeout time.Duration
}

// Server is a running throwaway Redis server. Its methods are safe for
// concurrent use.
type Server struct {
	opts    Options
	bin     string
	dir     string
	tempDir string // removed on Close; empty when Options.Dir was given

	mu     sync.Mutex
	port   int
	proc   *process // nil while stopped
	closed bool
}

// process is one run of redis-server.
type process struct {
	cmd   *exec.Cmd
	log   *logWriter
	done  chan struct{} // closed when the server has exited
	err   error         // its exit status, set before done is closed
	ready chan struct{} // closed when the ready line was logged
}

// Start starts a server and waits until it answers PING. Cancelling ctx
// aborts the wait and cleans up whatever was started.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 10 * time.Second
	}
	bin, err := FindBinary()
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, bin: bin, port: opts.Port}
	if opts.Dir == "" {
		dir, err := os.MkdirTemp("", "fencegate-redis-")
		if err != nil {
			return nil, fmt.Errorf("throwaway redis: %w", err)
		}
		s.tempDir, s.dir = dir, dir
	} else {
		abs, err := filepath.Abs(opts.Dir)
		if err != nil {
			return nil, fmt.Errorf("throwaway redis: %w", err)
		}
		if err := os.MkdirAll(abs, 0o700); err != nil {
			return nil, fmt.Errorf("throwaway redis: %w", err)
		}
		s.dir = abs
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.startLocked(ctx, false); err != nil {
		_ = s.removeTemp()
		return nil, err
	}
	return s, nil
}

// FindBinary returns the path of redis-server: the one on PATH, else
// /usr/bin or /usr/sbin. It returns ErrNotFound if there is none.
func FindBinary() (string, error) {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/bin/redis-server", "/usr/sbin/redis-server"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", ErrNotFound
}

// startLocked starts the server; with samePort it never moves to another
// port.
func (s *Server) startLocked(ctx context.Context, samePort bool) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.StartTimeout)
	defer cancel()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		if s.port == 0 || (!samePort && s.opts.Port == 0 && attempt > 0) {
			p, err := freePort()
			if err != nil {
				return err
			}
			s.port = p
		}
		lastErr = s.runLocked(ctx)
		if lastErr == nil {
			return nil
		}
		if ctx.Err() != nil || samePort || s.opts.Port != 0 {
			// A fixed port that is taken will stay taken.
			break
		}
	}
	return lastErr
}

func (s *Server) runLocked(ctx context.Context) error {
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--protected-mode", "yes",
		"--dir", s.dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--logfile", "",
		"--databases", "1",
	}
	// Not CommandContext: ctx bounds the start, not the server's life.
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	p := &process{cmd: cmd, done: make(chan struct{}), ready: make(chan struct{})}
	p.log = &logWriter{logf: s.opts.Logf, ready: p.ready}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("throwaway redis: start: %w", err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	fail := func(err error) error {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		return err
	}
	select {
	case <-p.ready:
	case <-p.done:
		return fmt.Errorf("throwaway redis: server exited during start (%v): %s", p.err, p.log.tail())
	case <-ctx.Done():
		return fail(fmt.Errorf("throwaway redis: server not ready: %w: %s", ctx.Err(), p.log.tail()))
	}
	if err := ping(ctx, s.addrLocked()); err != nil {
		return fail(fmt.Errorf("throwaway redis: server does not answer PING: %w: %s", err, p.log.tail()))
	}
	s.proc = p
	return nil
}

// ping sends one inline PING and expects +PONG.
func ping(ctx context.Context, addr string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("got %q, want +PONG", strings.TrimSpace(line))
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("throwaway redis: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Addr returns the server's host:port (127.0.0.1:<port>).
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addrLocked()
}

func (s *Server) addrLocked() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Port returns the TCP port the server listens on (on 127.0.0.1).
func (s *Server) Port() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.port
}

// Dir returns the server's working directory.
func (s *Server) Dir() string { return s.dir }

// PID returns the server's process id, or 0 while stopped.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Kill kills the server with SIGKILL, as a crash would, and waits for it to
// exit. Restart brings it back, empty.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return nil
	}
	_ = syscall.Kill(-s.proc.cmd.Process.Pid, syscall.SIGKILL)
	<-s.proc.done
	s.proc = nil
	return nil
}

// Restart stops the server if it runs and starts it again on the same port.
// Without persistence the new server is empty: no keys, no cached scripts.
// If ctx ends before the old server has stopped, it is killed.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("throwaway redis: restart after close")
	}
	if err := s.stopLocked(ctx.Done(), ctx.Err); err != nil {
		return err
	}
	return s.startLocked(ctx, true)
}

// Close stops the server (SIGTERM, SIGKILL after 10 seconds) and removes the
// temporary directory. Close is idempotent.
func (s *Server) Close() error {
	abort := make(chan struct{})
	t := time.AfterFunc(10*time.Second, func() { close(abort) })
	defer t.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.stopLocked(abort, func() error { return errors.New("shutdown took over 10s") })
	s.closed = true
	if rmErr := s.removeTemp(); err == nil {
		err = rmErr
	}
	return err
}

// stopLocked sends SIGTERM and waits for the server to exit, killing it if
// abort is closed first.
func (s *Server) stopLocked(abort <-chan struct{}, cause func() error) error {
	p := s.proc
	if p == nil {
		return nil
	}
	s.proc = nil
	pid := p.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("throwaway redis: stop: %w", err)
	}
	select {
	case <-p.done:
	case <-abort:
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("throwaway redis: stop: %w (killed)", cause())
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	return nil
}

func (s *Server) removeTemp() error {
	if s.tempDir == "" {
		return nil
	}
	dir := s.tempDir
	s.tempDir = ""
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("throwaway redis: %w", err)
	}
	return nil
}

// logWriter splits the server's output into lines, passes them to logf,
// keeps the last few for error messages and spots the ready line.
type logWriter struct {
	logf  func(string, ...any)
	ready chan struct{}

	mu      sync.Mutex
	partial []byte
	last    []string
	isReady bool
}

const keepLines = 20

func (w *logWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, b...)
	for {
		i := strings.IndexByte(string(w.partial), '\n')
		if i < 0 {
			break
		}
		line := string(w.partial[:i])
		w.partial = w.partial[i+1:]
		if w.logf != nil {
			w.logf("redis: %s", line)
		}
		if len(w.last) == keepLines {
			w.last = w.last[1:]
		}
		w.last = append(w.last, line)
		if !w.isReady && strings.Contains(line, readyLine) {
			w.isReady = true
			close(w.ready)
		}
	}
	return len(b), nil
}

func (w *logWriter) tail() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	lines := w.last
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}
