package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/election/freeport"
)

// bouncer is Debian's pgbouncer in session mode in front of the bench's
// PostgreSQL: the peer fencegate's PostgreSQL listener is compared with.
type bouncer struct {
	cmd  *exec.Cmd
	dir  string
	addr string
	done chan struct{}
}

// pgbouncerBinary finds pgbouncer; Debian installs it in /usr/sbin, which
// is not on every PATH.
func pgbouncerBinary() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer", nil
	}
	return "", errors.New("pgbouncer is not installed: install the Debian package pgbouncer (make deps does as root), or leave out --paths pg-bouncer")
}

// startBouncer starts pgbouncer on a free port, trusting users (the server
// behind it trusts them too) and pooling per session. It reaches the server
// at pgHost, 127.0.0.1 or the directory of its Unix socket.
func startBouncer(ctx context.Context, pgHost string, pgPort int, users ...string) (*bouncer, error) {
	bin, err := pgbouncerBinary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "fencebench-pgbouncer-")
	if err != nil {
		return nil, err
	}
	b := &bouncer{dir: dir, done: make(chan struct{})}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(dir)
		}
	}()
	if b.addr, err = freeport.Pick(); err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(b.addr)
	var userlist strings.Builder
	for _, u := range users {
		fmt.Fprintf(&userlist, "%q \"\"\n", u)
	}
	ini := fmt.Sprintf(`[databases]
postgres = host=%[4]s port=%[1]d dbname=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %s
unix_socket_dir =
auth_type = trust
auth_file = %[3]s/userlist.txt
pool_mode = session
max_client_conn = 1000
default_pool_size = 200
logfile = %[3]s/pgbouncer.log
pidfile =
log_connections = 0
log_disconnections = 0
ignore_startup_parameters = extra_float_digits
`, pgPort, port, dir, pgHost)
	if err := os.WriteFile(filepath.Join(dir, "userlist.txt"), []byte(userlist.String()), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "pgbouncer.ini"), []byte(ini), 0o600); err != nil {
		return nil, err
	}
	b.cmd = exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	attr := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// pgbouncer refuses to run as root: run it as PostgreSQL's user.
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("pgbouncer will not run as root, and there is no postgres user to run it as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		for _, f := range []string{dir, filepath.Join(dir, "userlist.txt"), filepath.Join(dir, "pgbouncer.ini")} {
			if err := os.Chown(f, uid, gid); err != nil {
				return nil, err
			}
		}
		attr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}
	}
	b.cmd.SysProcAttr = attr
	if err := b.cmd.Start(); err != nil {
		return nil, fmt.Errorf("pgbouncer: %w", err)
	}
	go func() { _ = b.cmd.Wait(); close(b.done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", b.addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-b.done:
			return nil, fmt.Errorf("pgbouncer exited: %s", b.logTail())
		case <-ctx.Done():
			b.Close()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.Close()
			return nil, fmt.Errorf("pgbouncer did not listen on %s within 10 s: %s", b.addr, b.logTail())
		}
	}
	ok = true
	logf("pgbouncer pid %d: %s, session pooling", b.cmd.Process.Pid, b.addr)
	return b, nil
}

func (b *bouncer) logTail() string {
	s, _ := os.ReadFile(filepath.Join(b.dir, "pgbouncer.log"))
	lines := strings.Split(strings.TrimSpace(string(s)), "\n")
	if len(lines) > 3 {
		lines = lines[len(lines)-3:]
	}
	return strings.Join(lines, " | ")
}

func (b *bouncer) pid() int { return b.cmd.Process.Pid }

// dsn is the DSN of the database behind pgbouncer for role.
func (b *bouncer) dsn(role string) string {
	return fmt.Sprintf("postgres://%s@%s/postgres?sslmode=disable", role, b.addr)
}

// Close stops pgbouncer (SIGTERM: immediate shutdown) and removes its files.
func (b *bouncer) Close() {
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
	case <-time.After(5 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.done
	}
	_ = os.RemoveAll(b.dir)
}
