package throwaway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrNotFound is returned by Start when the PostgreSQL server binaries are not
// installed.
var ErrNotFound = errors.New("throwaway postgres: PostgreSQL server binaries not found (install Debian package postgresql)")

// readyLine is what the postmaster logs once it accepts connections; the
// cluster is created with the C locale, so it is never translated.
const readyLine = "database system is ready to accept connections"

// Options configure Start. The zero value is ready to use.
type Options struct {
	// Dir is the data directory. Empty means a new temporary directory,
	// removed by Close. A Dir that already holds a cluster is reused; a Dir
	// given here is never removed.
	Dir string
	// Port is the TCP port on 127.0.0.1; 0 picks a free one.
	Port int
	// Logf, if set, receives the server's log lines.
	Logf func(format string, args ...any)
	// Durable keeps fsync, synchronous_commit and full_page_writes on. Off by
	// default: a throwaway server trades crash safety for speed.
	Durable bool
	// StartTimeout bounds how long Start and Restart wait for the server to
	// accept connections, in addition to ctx. Zero means 30s.
	StartTimeout time.Duration
}

// Server is a running throwaway PostgreSQL server. Its methods are safe for
// concurrent use.
type Server struct {
	opts    Options
	binDir  string
	dataDir string
	tempDir string // removed on Close; empty when Options.Dir was given
	cred    *syscall.Credential

	mu     sync.Mutex
	port   int
	proc   *process // nil while stopped
	closed bool
}

// process is one run of the postmaster.
type process struct {
	cmd   *exec.Cmd
	log   *logWriter
	done  chan struct{} // closed when the postmaster has exited
	err   error         // its exit status, set before done is closed
	ready chan struct{} // closed when the ready line was logged
}

// Start creates (or reuses, see Options.Dir) a cluster, starts the server and
// waits until it accepts connections. Cancelling ctx aborts the wait and
// cleans up whatever was started.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 30 * time.Second
	}
	binDir, err := FindBinDir()
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, binDir: binDir, port: opts.Port}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("throwaway postgres: running as root needs a %q user to run the server as: %w", "postgres", err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}
	}
	if err := s.initCluster(ctx); err != nil {
		_ = s.removeTemp()
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.startLocked(ctx, false); err != nil {
		_ = s.removeTemp()
		return nil, err
	}
	return s, nil
}

// FindBinDir returns the directory holding initdb and postgres: the one on
// PATH if both are there, else the highest version under
// /usr/lib/postgresql/*/bin. It returns ErrNotFound if there is none.
func FindBinDir() (string, error) {
	if p, err := exec.LookPath("postgres"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			dir := filepath.Dir(real)
			if isExecutable(filepath.Join(dir, "initdb")) {
				return dir, nil
			}
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, dir := range dirs {
		if isExecutable(filepath.Join(dir, "postgres")) && isExecutable(filepath.Join(dir, "initdb")) {
			return dir, nil
		}
	}
	return "", ErrNotFound
}

func versionOf(binDir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	return v
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

func (s *Server) initCluster(ctx context.Context) error {
	if s.opts.Dir == "" {
		dir, err := os.MkdirTemp("", "fencegate-pg-")
		if err != nil {
			return fmt.Errorf("throwaway postgres: %w", err)
		}
		s.tempDir = dir
		s.dataDir = filepath.Join(dir, "data")
	} else {
		abs, err := filepath.Abs(s.opts.Dir)
		if err != nil {
			return fmt.Errorf("throwaway postgres: %w", err)
		}
		s.dataDir = abs
		if _, err := os.Stat(filepath.Join(abs, "PG_VERSION")); err == nil {
			return nil // an existing cluster
		}
	}
	if err := os.MkdirAll(s.dataDir, 0o700); err != nil {
		return fmt.Errorf("throwaway postgres: %w", err)
	}
	if s.cred != nil {
		for _, d := range []string{s.tempDir, s.dataDir} {
			if d == "" {
				continue
			}
			if err := os.Chown(d, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
				return fmt.Errorf("throwaway postgres: %w", err)
			}
		}
	}
	cmd := s.command(ctx, "initdb", "-D", s.dataDir, "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("throwaway postgres: initdb in %s: %w: %s", s.dataDir, err, lastLines(string(out), 5))
	}
	return nil
}

// command builds a command for one of the server binaries, run as the
// postgres user when we are root, with PG* variables removed from the
// environment so they cannot redirect it.
func (s *Server) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(s.binDir, name), args...)
	env := []string{"LC_ALL=C"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") && !strings.HasPrefix(kv, "LC_") && !strings.HasPrefix(kv, "LANG") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	cmd.Dir = s.dataDir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	return cmd
}

// startLocked starts the postmaster; with samePort it never moves to
// another port.
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
		"-D", s.dataDir,
		"-p", strconv.Itoa(s.port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=" + s.dataDir,
		"-c", "logging_collector=off",
	}
	if !s.opts.Durable {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	// Not CommandContext: ctx bounds the start, not the server's life.
	cmd := exec.Command(filepath.Join(s.binDir, "postgres"), args...)
	base := s.command(ctx, "postgres")
	cmd.Env, cmd.Dir = base.Env, base.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: s.cred,
		// Its own process group, so Kill takes the backends down with it.
		Setpgid: true,
		// If we die without stopping it, immediate shutdown.
		Pdeathsig: syscall.SIGQUIT,
	}
	p := &process{cmd: cmd, done: make(chan struct{}), ready: make(chan struct{})}
	p.log = &logWriter{logf: s.opts.Logf, ready: p.ready}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("throwaway postgres: start: %w", err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	select {
	case <-p.ready:
		s.proc = p
		return nil
	case <-p.done:
		return fmt.Errorf("throwaway postgres: server exited during start (%v): %s", p.err, p.log.tail())
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("throwaway postgres: server not ready: %w: %s", ctx.Err(), p.log.tail())
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("throwaway postgres: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// DSN returns a connection string for the postgres superuser and database
// over TCP.
func (s *Server) DSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.Port())
}

// Port returns the TCP port the server listens on (on 127.0.0.1).
func (s *Server) Port() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.port
}

// SocketDir returns the directory of the server's unix socket.
func (s *Server) SocketDir() string { return s.dataDir }

// DataDir returns the cluster's data directory.
func (s *Server) DataDir() string { return s.dataDir }

// PID returns the postmaster's process id, or 0 while stopped.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Kill kills the server and all its backends with SIGKILL, as a crash would,
// and waits for the postmaster to exit. Restart brings it back (with crash
// recovery).
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

// Restart stops the server if it runs (fast shutdown) and starts it again
// on the same port with the same data.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("throwaway postgres: restart after close")
	}
	if err := s.stopLocked(ctx.Done(), ctx.Err); err != nil {
		return err
	}
	return s.startLocked(ctx, true)
}

// Stop stops the server with a fast shutdown (what `pg_ctl stop -m fast`
// does: roll back open transactions, disconnect clients) and removes the
// temporary directory. If ctx ends first the server is killed. Stop is
// idempotent.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.stopLocked(ctx.Done(), ctx.Err)
	s.closed = true
	if rmErr := s.removeTemp(); err == nil {
		err = rmErr
	}
	return err
}

// Close is Stop with a 30 second limit on the shutdown, after which the
// server is killed.
func (s *Server) Close() error {
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	abort := make(chan struct{})
	go func() {
		select {
		case <-t.C:
			close(abort)
		case <-abort:
		}
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.stopLocked(abort, func() error { return errors.New("shutdown took over 30s") })
	select {
	case <-abort:
	default:
		close(abort)
	}
	s.closed = true
	if rmErr := s.removeTemp(); err == nil {
		err = rmErr
	}
	return err
}

// stopLocked asks for a fast shutdown and waits for it, killing the server
// if abort is closed first.
func (s *Server) stopLocked(abort <-chan struct{}, cause func() error) error {
	p := s.proc
	if p == nil {
		return nil
	}
	s.proc = nil
	pid := p.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGINT); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("throwaway postgres: stop: %w", err)
	}
	select {
	case <-p.done:
	case <-abort:
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("throwaway postgres: stop: %w (killed)", cause())
	}
	// Backends have exited with the postmaster; make sure of it.
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
		return fmt.Errorf("throwaway postgres: %w", err)
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
			w.logf("postgres: %s", line)
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
	return lastLines(strings.Join(w.last, "\n"), 5)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
