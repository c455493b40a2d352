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
	"syscall"
	"time"

	"github.com/fencegate/fencegate/proxy/internal/serverproc"
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
	// Databases is the number of databases (redis-server --databases).
	// Zero means 1, so that a command reaching another database fails;
	// tests of such commands ask for more.
	Databases int
	// TLS, when not nil, makes the server serve TLS only, on Port: there is
	// no plain TCP listener.
	TLS *TLSOptions
	// Users are ACL users, each a line as in redis.conf after "user": a
	// name and its rules, e.g. "fencegate on >secret ~* &* -@all +evalsha".
	// A line for "default" replaces the default user's rules (which are
	// "on nopass ~* &* +@all" otherwise).
	Users []string
	// UnixSocket, when true, makes the server also listen on a Unix socket
	// in its directory (redis-server --unixsocket), at SocketPath.
	UnixSocket bool
}

// TLSOptions are the server's TLS files (redis-server --tls-*).
type TLSOptions struct {
	// CertFile and KeyFile are the server's certificate and key.
	CertFile, KeyFile string
	// CAFile is the bundle that client certificates are verified with.
	CAFile string
	// AuthClients requires a client certificate signed by CAFile
	// (tls-auth-clients yes); otherwise none is asked for.
	AuthClients bool
}

// Server is a running throwaway Redis server. Its methods are safe for
// concurrent use.
type Server struct {
	opts    Options
	bin     string
	dir     string
	tempDir string // removed on Close; empty when Options.Dir was given
	run     *serverproc.Runner
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
	s := &Server{opts: opts, bin: bin}
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
	s.run = serverproc.NewRunner(serverproc.Config{
		Name:         "throwaway redis",
		Port:         opts.Port,
		StartTimeout: opts.StartTimeout,
		StopSignal:   syscall.SIGTERM,
		TempDir:      s.tempDir,
		Run:          s.runServer,
	})
	if err := s.run.Start(ctx); err != nil {
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

// runServer starts redis-server on port and waits until it answers PING.
func (s *Server) runServer(ctx context.Context, port int) (*serverproc.Process, error) {
	args := []string{
		"--bind", "127.0.0.1",
		"--protected-mode", "yes",
		"--dir", s.dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--logfile", "",
		"--databases", strconv.Itoa(max(1, s.opts.Databases)),
	}
	if t := s.opts.TLS; t != nil {
		auth := "no"
		if t.AuthClients {
			auth = "yes"
		}
		args = append(args, "--port", "0", "--tls-port", strconv.Itoa(port),
			"--tls-cert-file", t.CertFile, "--tls-key-file", t.KeyFile, "--tls-auth-clients", auth)
		if t.CAFile != "" {
			args = append(args, "--tls-ca-cert-file", t.CAFile)
		}
	} else {
		args = append(args, "--port", strconv.Itoa(port))
	}
	if s.opts.UnixSocket {
		args = append(args, "--unixsocket", s.SocketPath(), "--unixsocketperm", "700")
	}
	for _, u := range s.opts.Users {
		// Each word is one argument of the "user" directive.
		args = append(args, append([]string{"--user"}, strings.Fields(u)...)...)
	}
	// Not CommandContext: ctx bounds the start, not the server's life.
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	p, err := serverproc.Start(cmd, serverproc.NewLogWriter("redis", readyLine, s.opts.Logf))
	if err != nil {
		return nil, fmt.Errorf("throwaway redis: start: %w", err)
	}
	if err := p.WaitReady(ctx); err != nil {
		return nil, fmt.Errorf("throwaway redis: %w: %s", err, tail(p.Log()))
	}
	check := ping
	if s.opts.TLS != nil {
		// The harness holds no client certificate: a TCP connection to the
		// TLS port, after the ready line, is the check.
		check = dial
	}
	if err := check(ctx, addr(port)); err != nil {
		p.Kill()
		return nil, fmt.Errorf("throwaway redis: server does not answer PING: %w: %s", err, tail(p.Log()))
	}
	return p, nil
}

// dial checks that addr accepts a TCP connection.
func dial(ctx context.Context, addr string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return conn.Close()
}

// ping sends one inline PING and expects +PONG, or -NOAUTH when Users
// turned the default user's password on: either is the server answering.
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
	if line = strings.TrimSpace(line); line != "+PONG" && !strings.HasPrefix(line, "-NOAUTH") {
		return fmt.Errorf("got %q, want +PONG", line)
	}
	return nil
}

// Addr returns the server's host:port (127.0.0.1:<port>).
func (s *Server) Addr() string { return addr(s.run.Port()) }

func addr(port int) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// Port returns the TCP port the server listens on (on 127.0.0.1).
func (s *Server) Port() int { return s.run.Port() }

// SocketPath returns the path of the server's Unix socket, which it
// listens on when Options.UnixSocket is set.
func (s *Server) SocketPath() string { return filepath.Join(s.dir, "redis.sock") }

// Dir returns the server's working directory.
func (s *Server) Dir() string { return s.dir }

// PID returns the server's process id, or 0 while stopped.
func (s *Server) PID() int { return s.run.PID() }

// Kill kills the server with SIGKILL, as a crash would, and waits for it to
// exit. Restart brings it back, empty.
func (s *Server) Kill() error { return s.run.Kill() }

// Restart stops the server if it runs and starts it again on the same port.
// Without persistence the new server is empty: no keys, no cached scripts.
// If ctx ends before the old server has stopped, it is killed.
func (s *Server) Restart(ctx context.Context) error { return s.run.Restart(ctx) }

// Close stops the server (SIGTERM, SIGKILL after 10 seconds) and removes the
// temporary directory. Close is idempotent.
func (s *Server) Close() error { return s.run.Close(10 * time.Second) }

// tail is the end of the server's log for an error message.
func tail(w *serverproc.LogWriter) string { return strings.Join(w.Tail(5), " | ") }
