package throwaway

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/migrations"
	"github.com/fencegate/fencegate/proxy/internal/serverproc"
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
	// TLS, when not nil, turns ssl on with this certificate and key.
	// Clients may still connect without TLS (sslmode=disable).
	TLS *TLSOptions
}

// TLSOptions are the server's certificate and key files. Start copies them
// into the data directory, owned by the server's user with mode 0600, as
// PostgreSQL requires of its key.
type TLSOptions struct {
	CertFile, KeyFile string
}

// Server is a running throwaway PostgreSQL server. Its methods are safe for
// concurrent use.
type Server struct {
	opts    Options
	binDir  string
	dataDir string
	tempDir string // removed on Close; empty when Options.Dir was given
	cred    *syscall.Credential
	run     *serverproc.Runner
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
	s := &Server{opts: opts, binDir: binDir}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("throwaway postgres: running as root needs a %q user to run the server as: %w", "postgres", err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}
	}
	err = s.initCluster(ctx)
	if err == nil {
		err = s.installTLS()
	}
	if err != nil {
		if s.tempDir != "" {
			_ = os.RemoveAll(s.tempDir)
		}
		return nil, err
	}
	s.run = serverproc.NewRunner(serverproc.Config{
		Name:         "throwaway postgres",
		Port:         opts.Port,
		StartTimeout: opts.StartTimeout,
		StopSignal:   syscall.SIGINT, // fast shutdown
		TempDir:      s.tempDir,
		Run:          s.runPostmaster,
	})
	if err := s.run.Start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// FindBinDir returns the directory holding initdb and postgres: the one on
// PATH if both are there, else the highest version under
// /usr/lib/postgresql/*/bin. It returns ErrNotFound if there is none.
func FindBinDir() (string, error) {
	if p, err := exec.LookPath("postgres"); err == nil {
		if resolved, err := filepath.EvalSymlinks(p); err == nil {
			dir := filepath.Dir(resolved)
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

// tlsCertName and tlsKeyName are the server's certificate and key in the
// data directory.
const (
	tlsCertName = "fencegate-server.crt"
	tlsKeyName  = "fencegate-server.key"
)

// installTLS copies Options.TLS's files into the data directory, owned by
// the server's user.
func (s *Server) installTLS() error {
	t := s.opts.TLS
	if t == nil {
		return nil
	}
	for _, f := range []struct{ from, to string }{{t.CertFile, tlsCertName}, {t.KeyFile, tlsKeyName}} {
		data, err := os.ReadFile(f.from)
		if err != nil {
			return fmt.Errorf("throwaway postgres: TLS: %w", err)
		}
		to := filepath.Join(s.dataDir, f.to)
		if err := os.WriteFile(to, data, 0o600); err != nil {
			return fmt.Errorf("throwaway postgres: TLS: %w", err)
		}
		if err := os.Chmod(to, 0o600); err != nil {
			return fmt.Errorf("throwaway postgres: TLS: %w", err)
		}
		if s.cred != nil {
			if err := os.Chown(to, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
				return fmt.Errorf("throwaway postgres: TLS: %w", err)
			}
		}
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

// runPostmaster starts the postmaster on port and waits until it accepts
// connections.
func (s *Server) runPostmaster(ctx context.Context, port int) (*serverproc.Process, error) {
	args := []string{
		"-D", s.dataDir,
		"-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=" + s.dataDir,
		"-c", "logging_collector=off",
	}
	if s.opts.TLS != nil {
		args = append(args, "-c", "ssl=on", "-c", "ssl_cert_file="+tlsCertName, "-c", "ssl_key_file="+tlsKeyName)
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
	p, err := serverproc.Start(cmd, serverproc.NewLogWriter("postgres", readyLine, s.opts.Logf))
	if err != nil {
		return nil, fmt.Errorf("throwaway postgres: start: %w", err)
	}
	if err := p.WaitReady(ctx); err != nil {
		return nil, fmt.Errorf("throwaway postgres: %w: %s", err, tail(p.Log()))
	}
	return p, nil
}

// DSN returns a connection string for the postgres superuser and database
// over TCP.
func (s *Server) DSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.Port())
}

// Port returns the TCP port the server listens on (on 127.0.0.1).
func (s *Server) Port() int { return s.run.Port() }

// SocketDir returns the directory of the server's unix socket.
func (s *Server) SocketDir() string { return s.dataDir }

// DataDir returns the cluster's data directory.
func (s *Server) DataDir() string { return s.dataDir }

// PID returns the postmaster's process id, or 0 while stopped.
func (s *Server) PID() int { return s.run.PID() }

// Kill kills the server and all its backends with SIGKILL, as a crash would,
// and waits for the postmaster to exit. Restart brings it back (with crash
// recovery).
func (s *Server) Kill() error { return s.run.Kill() }

// Restart stops the server if it runs (fast shutdown) and starts it again
// on the same port with the same data.
func (s *Server) Restart(ctx context.Context) error { return s.run.Restart(ctx) }

// Stop stops the server with a fast shutdown (what `pg_ctl stop -m fast`
// does: roll back open transactions, disconnect clients) and removes the
// temporary directory. If ctx ends first the server is killed. Stop is
// idempotent.
func (s *Server) Stop(ctx context.Context) error { return s.run.Stop(ctx.Done(), ctx.Err) }

// Close is Stop with a 30 second limit on the shutdown, after which the
// server is killed.
func (s *Server) Close() error { return s.run.Close(30 * time.Second) }

// tail is the end of the server's log for an error message.
func tail(w *serverproc.LogWriter) string {
	return lastLines(strings.Join(w.Tail(serverproc.KeepLines), "\n"), 5)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// DSNAs returns a connection string like DSN's for another role. The
// cluster trusts every local connection, so no password is needed.
func (s *Server) DSNAs(role string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", url.PathEscape(role), s.Port())
}

// RuntimeRole sets the server up as a deployment would, for fencegate to
// serve as a role that is not a superuser: it applies fencegate's schema as
// the superuser, creates login role (if missing), makes it a member of
// migrations.RuntimeRole and gives it the use of the tables and sequences
// the superuser creates in schema public, as an application's role would
// have, and no temporary tables. It returns role's DSN.
func (s *Server) RuntimeRole(ctx context.Context, role string) (string, error) {
	return s.appRole(ctx, role, true)
}

// ListenerRole is RuntimeRole for a login that clients of fencegate's
// PostgreSQL listener use: the same use of schema public's tables and
// sequences, and no fencegate role (the listener refuses a login that may
// run fencegate's own functions).
func (s *Server) ListenerRole(ctx context.Context, role string) (string, error) {
	return s.appRole(ctx, role, false)
}

func (s *Server) appRole(ctx context.Context, role string, runtime bool) (string, error) {
	conn, err := pgx.Connect(ctx, s.DSN())
	if err != nil {
		return "", fmt.Errorf("throwaway postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := migrations.Apply(ctx, conn); err != nil {
		return "", fmt.Errorf("throwaway postgres: %w", err)
	}
	id := pgx.Identifier{role}.Sanitize()
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = $1)", role).Scan(&exists); err != nil {
		return "", fmt.Errorf("throwaway postgres: %w", err)
	}
	stmts := []string{
		"ALTER DEFAULT PRIVILEGES FOR ROLE postgres IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO " + id,
		"ALTER DEFAULT PRIVILEGES FOR ROLE postgres IN SCHEMA public GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO " + id,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO " + id,
		"GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO " + id,
		// Temporary tables can shadow real ones for the rest of a pooled
		// session: a role that writes through fencegate needs none.
		"REVOKE TEMPORARY ON DATABASE postgres FROM PUBLIC",
	}
	if !exists {
		stmts = append([]string{"CREATE ROLE " + id + " LOGIN"}, stmts...)
	}
	for _, sql := range stmts {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return "", fmt.Errorf("throwaway postgres: %s: %w", sql, err)
		}
	}
	if runtime {
		if err := migrations.GrantRuntime(ctx, conn, role); err != nil {
			return "", fmt.Errorf("throwaway postgres: %w", err)
		}
	}
	return s.DSNAs(role), nil
}
