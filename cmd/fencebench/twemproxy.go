package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/election/freeport"
)

// twemproxy is Debian's nutcracker in front of the bench's Redis: the
// proxy Redis users know, compared with fencegate's RESP listener. It
// keeps its default of one server connection, over which it pipelines
// every client's commands.
type twemproxy struct {
	cmd  *exec.Cmd
	dir  string
	addr string
	done chan struct{}
}

// nutcrackerBinary finds nutcracker; Debian installs it in /usr/sbin.
func nutcrackerBinary() (string, error) {
	if p, err := exec.LookPath("nutcracker"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/nutcracker"); err == nil {
		return "/usr/sbin/nutcracker", nil
	}
	return "", errors.New("nutcracker (twemproxy) is not installed: install the Debian package nutcracker (make deps does as root), or leave out --paths redis-twemproxy")
}

// startTwemproxy starts nutcracker on a free port in front of redisAddr.
func startTwemproxy(ctx context.Context, redisAddr string) (*twemproxy, error) {
	bin, err := nutcrackerBinary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "fencebench-twemproxy-")
	if err != nil {
		return nil, err
	}
	tp := &twemproxy{dir: dir, done: make(chan struct{})}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(dir)
		}
	}()
	if tp.addr, err = freeport.Pick(); err != nil {
		return nil, err
	}
	stats, err := freeport.Pick()
	if err != nil {
		return nil, err
	}
	_, statsPort, _ := net.SplitHostPort(stats)
	conf := fmt.Sprintf(`fencebench:
  listen: %s
  redis: true
  hash: fnv1a_64
  distribution: ketama
  auto_eject_hosts: false
  timeout: 10000
  servers:
    - %s:1
`, tp.addr, redisAddr)
	confPath := filepath.Join(dir, "nutcracker.yml")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	tp.cmd = exec.Command(bin, "-c", confPath, "-o", filepath.Join(dir, "nutcracker.log"), "-s", statsPort, "-a", "127.0.0.1")
	tp.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := tp.cmd.Start(); err != nil {
		return nil, fmt.Errorf("nutcracker: %w", err)
	}
	go func() { _ = tp.cmd.Wait(); close(tp.done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", tp.addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-tp.done:
			return nil, fmt.Errorf("nutcracker exited: %s", tp.logTail())
		case <-ctx.Done():
			tp.Close()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			tp.Close()
			return nil, fmt.Errorf("nutcracker did not listen on %s within 10 s: %s", tp.addr, tp.logTail())
		}
	}
	ok = true
	logf("nutcracker (twemproxy) pid %d: %s in front of Redis %s", tp.cmd.Process.Pid, tp.addr, redisAddr)
	return tp, nil
}

func (tp *twemproxy) logTail() string {
	s, _ := os.ReadFile(filepath.Join(tp.dir, "nutcracker.log"))
	lines := strings.Split(strings.TrimSpace(string(s)), "\n")
	if len(lines) > 3 {
		lines = lines[len(lines)-3:]
	}
	return strings.Join(lines, " | ")
}

func (tp *twemproxy) pid() int { return tp.cmd.Process.Pid }

// Close stops nutcracker and removes its files.
func (tp *twemproxy) Close() {
	_ = tp.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-tp.done:
	case <-time.After(5 * time.Second):
		_ = tp.cmd.Process.Kill()
		<-tp.done
	}
	_ = os.RemoveAll(tp.dir)
}

// respConn is a minimal RESP client: one connection, one command at a
// time, the same on every RESP path (twemproxy answers no HELLO, which
// go-redis sends first), so that the paths differ only by what is
// between the client and Redis.
type respConn struct {
	c   net.Conn
	br  *bufio.Reader
	cmd []byte
	// want, when set, is the whole reply cmd must get (a fenced script's
	// array); without it a one-line reply is read.
	want, got []byte
}

// dialRESP connects to addr, sending auth (e.g. AUTH fence token) first
// when given, and prepares cmd to be sent by do.
func dialRESP(ctx context.Context, addr string, auth []string, cmd ...string) (*respConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	r := &respConn{c: c, br: bufio.NewReader(c)}
	if len(auth) > 0 {
		r.cmd = appendRESP(nil, auth...)
		if err := r.do(ctx); err != nil {
			c.Close()
			return nil, fmt.Errorf("%s: %w", auth[0], err)
		}
	}
	r.cmd = appendRESP(nil, cmd...)
	return r, nil
}

func appendRESP(b []byte, args ...string) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, '\r', '\n')
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, '\r', '\n')
		b = append(b, a...)
		b = append(b, '\r', '\n')
	}
	return b
}

// errReply is an error reply of the server.
type errReply string

func (e errReply) Error() string { return string(e) }

// do sends the prepared command and reads its one-line reply (the status
// or error replies of SET and AUTH).
func (r *respConn) do(ctx context.Context) error {
	if dl, ok := ctx.Deadline(); ok {
		_ = r.c.SetDeadline(dl)
	}
	if _, err := r.c.Write(r.cmd); err != nil {
		return err
	}
	if r.want != nil {
		var err error
		if r.got, err = r.reply(r.got[:0]); err != nil {
			return err
		}
		if !bytes.Equal(r.got, r.want) {
			return fmt.Errorf("reply %q, want %q", r.got, r.want)
		}
		return nil
	}
	line, err := r.br.ReadSlice('\n')
	if err != nil {
		return err
	}
	if len(line) > 0 && line[0] == '-' {
		return errReply(strings.TrimRight(string(line[1:]), "\r\n"))
	}
	return nil
}

// reply reads one RESP2 reply, nested arrays included, and appends its
// bytes to dst.
func (r *respConn) reply(dst []byte) ([]byte, error) {
	line, err := r.br.ReadSlice('\n')
	if err != nil {
		return dst, err
	}
	dst = append(dst, line...)
	if len(line) < 3 || (line[0] != '$' && line[0] != '*') {
		return dst, nil
	}
	n, err := strconv.Atoi(string(line[1 : len(line)-2]))
	if err != nil {
		return dst, fmt.Errorf("malformed reply %q", line)
	}
	if line[0] == '$' {
		if n < 0 {
			return dst, nil
		}
		at := len(dst)
		dst = slices.Grow(dst, n+2)[:at+n+2]
		_, err = io.ReadFull(r.br, dst[at:])
		return dst, err
	}
	for range n {
		if dst, err = r.reply(dst); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

func (r *respConn) Close() error { return r.c.Close() }
