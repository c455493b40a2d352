package throwaway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/election/freeport"
)

// ErrNotFound is returned by Start when ZooKeeper or java is not installed.
var ErrNotFound = errors.New("throwaway zookeeper: zookeeper.jar or java not found (install Debian package zookeeper)")

// Jar is where Debian's zookeeper package puts the server; its manifest's
// Class-Path names the jars it needs.
const Jar = "/usr/share/java/zookeeper.jar"

// Options configure Start. The zero value is ready to use.
type Options struct {
	// TickTime is ZooKeeper's tick: sessions may time out between 2 and 20
	// ticks. Zero means 100ms, so sessions of 200ms to 2s are granted.
	TickTime time.Duration
	// MaxSessionTimeout caps the session timeouts granted. Zero means 20
	// ticks (ZooKeeper's default).
	MaxSessionTimeout time.Duration
	// StartTimeout bounds how long Start waits for the server, in addition
	// to ctx. Zero means 30s (a cold JVM is slow on a busy machine).
	StartTimeout time.Duration
	// Log, if set, receives the server's output.
	Log io.Writer
}

// Server is a running throwaway ZooKeeper server.
type Server struct {
	dir  string
	port int
	java string
	opts Options

	mu     sync.Mutex
	cmd    *exec.Cmd // nil while stopped
	done   chan struct{}
	closed bool
}

// Start starts a server and waits until it serves sessions (the srvr
// four-letter command reports its mode).
// Cancelling ctx aborts the wait and cleans up whatever was started.
func Start(ctx context.Context, opts Options) (*Server, error) {
	java, err := exec.LookPath("java")
	if err != nil {
		return nil, ErrNotFound
	}
	if _, err := os.Stat(Jar); err != nil {
		return nil, ErrNotFound
	}
	if opts.TickTime == 0 {
		opts.TickTime = 100 * time.Millisecond
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 30 * time.Second
	}
	port, err := freeport.Port() // below the ephemeral range: Restart binds it again
	if err != nil {
		return nil, fmt.Errorf("throwaway zookeeper: %w", err)
	}
	dir, err := os.MkdirTemp("", "fencegate-zookeeper-")
	if err != nil {
		return nil, fmt.Errorf("throwaway zookeeper: %w", err)
	}
	s := &Server{dir: dir, port: port, java: java, opts: opts}
	cfg := []string{
		"tickTime=" + strconv.FormatInt(opts.TickTime.Milliseconds(), 10),
		"dataDir=" + filepath.Join(dir, "data"),
		"clientPort=" + strconv.Itoa(port),
		"clientPortAddress=127.0.0.1",
		"4lw.commands.whitelist=srvr,ruok",
		"admin.enableServer=false",
		// Nothing outlives Close: no snapshot purging, no autopurge thread.
		"autopurge.purgeInterval=0",
	}
	if opts.MaxSessionTimeout > 0 {
		cfg = append(cfg, "maxSessionTimeout="+strconv.FormatInt(opts.MaxSessionTimeout.Milliseconds(), 10))
	}
	if err := os.WriteFile(s.conf(), []byte(strings.Join(cfg, "\n")+"\n"), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("throwaway zookeeper: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.startLocked(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

func (s *Server) conf() string { return filepath.Join(s.dir, "zoo.cfg") }

// startLocked starts the server process on s's port and data and waits
// until it serves sessions; on failure nothing is left running.
func (s *Server) startLocked(ctx context.Context) error {
	// Not CommandContext: ctx bounds the start, not the server's life.
	cmd := exec.Command(s.java, "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Dzookeeper.log.dir="+s.dir, "-cp", Jar, "org.apache.zookeeper.server.ZooKeeperServerMain", s.conf())
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = s.opts.Log, s.opts.Log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("throwaway zookeeper: start: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()

	sctx, cancel := context.WithTimeout(ctx, s.opts.StartTimeout)
	defer cancel()
	for {
		if serving(sctx, s.Addr()) == nil {
			s.cmd, s.done = cmd, done
			return nil
		}
		select {
		case <-done:
			return errors.New("throwaway zookeeper: server exited at start")
		case <-sctx.Done():
			stop(cmd, done, syscall.SIGKILL)
			return fmt.Errorf("throwaway zookeeper: not serving: %w", sctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stop signals the server's process group and waits for it to exit, with
// SIGKILL after 10 seconds.
func stop(cmd *exec.Cmd, done <-chan struct{}, sig syscall.Signal) {
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// Kill stops the server with SIGKILL, as a crash would: sessions are not
// closed, and what it had written to its data directory stays for
// Restart. Killing a stopped server does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		stop(s.cmd, s.done, syscall.SIGKILL)
		s.cmd, s.done = nil, nil
	}
}

// Restart starts a server stopped by Kill again, on the same port and
// data: its nodes, and sessions that clients resume within their timeout,
// are as before. Restarting a running server does nothing.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("throwaway zookeeper: closed")
	}
	if s.cmd != nil {
		return nil
	}
	return s.startLocked(ctx)
}

// serving asks the server the srvr four-letter command and wants its
// mode: ruok answers imok before the server takes sessions.
func serving(ctx context.Context, addr string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("srvr")); err != nil {
		return err
	}
	b, err := io.ReadAll(conn)
	if !strings.Contains(string(b), "Mode: standalone") {
		if err != nil {
			return fmt.Errorf("srvr: got %q, want Mode: standalone: %w", b, err)
		}
		return fmt.Errorf("srvr: got %q, want Mode: standalone", b)
	}
	return nil
}

// Addr returns the server's client address, 127.0.0.1:<port>.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// PID is the server's process id; 0 once stopped.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Close stops the server (SIGTERM, SIGKILL after 10 seconds) and removes
// its directory. Close is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		stop(s.cmd, s.done, syscall.SIGTERM)
		s.cmd, s.done = nil, nil
	}
	s.closed = true
	return os.RemoveAll(s.dir)
}
