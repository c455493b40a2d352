package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestRedTeam22SighupOutsideServingKills
//
// Attack: SIGHUP, which security.go and --help document as "re-read
// certificates, tokens and policy, re-open the audit log (for
// logrotate)", sent at an ordinary but unlucky moment: logrotate's
// postrotate `kill -HUP`, or `systemctl reload`, while fencegate is
// (a) still starting (dialing etcd, here an etcd that accepts TCP and
// is slow to answer), or (b) draining after SIGTERM with a PostgreSQL
// listener transaction still open.
//
// What happened: serve only installs its SIGHUP handler inside the
// serving errgroup, after everything is dialed, and removes it (defer
// signal.Stop) as soon as shutdown begins. Outside that window SIGHUP has
// Go's default action: the process is killed on the spot. (a) A start
// is aborted by a routine logrotate run (killed by signal, no error
// line); (b) a draining replica dies mid-drain: the open transaction is
// cut off instead of being allowed to commit within --shutdown-timeout,
// and the process exits by signal instead of 0 after a drain, so a
// supervisor sees a crash.
//
// What should happen: SIGHUP is caught for the whole life of the
// process (signal.Notify before dialing anything, kept until exit);
// outside serving it is ignored or logged. The start goes on; the drain
// goes on, the held transaction commits and the process exits 0.
//
// Severity: low-medium (availability / graceful-shutdown guarantee broken
// by a routine operator signal; no fencing violation).
func TestRedTeam22SighupOutsideServingKills(t *testing.T) {
	t.Run("starting", func(t *testing.T) {
		bin := rt2Binary(t)
		// An "etcd" that accepts connections and never answers.
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer lis.Close()
		go func() {
			var held []net.Conn
			defer func() {
				for _, c := range held {
					c.Close()
				}
			}()
			for {
				c, err := lis.Accept()
				if err != nil {
					return
				}
				held = append(held, c)
			}
		}()
		errPath := filepath.Join(t.TempDir(), "serve.err")
		f, err := os.Create(errPath)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd := exec.Command(bin, "serve", "--etcd-endpoints="+lis.Addr().String(), "--etcd-dial-timeout=8s",
			"--redis-addr=127.0.0.1:1", "--grpc-addr=127.0.0.1:0", "--http-addr=127.0.0.1:0")
		cmd.Stdout, cmd.Stderr = f, f
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		defer func() {
			select {
			case <-exited:
			default:
				_ = cmd.Process.Kill()
				<-exited
			}
		}()
		time.Sleep(1500 * time.Millisecond) // dialing etcd
		if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-exited:
			exited <- err
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					b, _ := os.ReadFile(errPath)
					t.Errorf("starting serve was killed by SIGHUP (%v) instead of going on; it said:\n%s", ws.Signal(), b)
					return
				}
			}
			b, _ := os.ReadFile(errPath)
			t.Logf("serve exited %v after SIGHUP:\n%s", err, b)
		case <-time.After(2 * time.Second):
			// Still starting: the signal was handled.
		}
	})

	t.Run("draining", func(t *testing.T) {
		e := newRT2Env(t)
		p := e.startServe(t, "--shutdown-timeout=20s")
		tok, _ := e.lead(t, "rt22hup", "w1")
		ctx := t.Context()
		c, err := pgx.Connect(ctx, fmt.Sprintf("postgres://app@%s/postgres?sslmode=disable&fencegate.fence=rt22hup&fencegate.token=%d", p.pg, tok))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.WithoutCancel(ctx))
		if _, err := c.Exec(ctx, "BEGIN"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Exec(ctx, "INSERT INTO rt2 VALUES ('rt22-held')"); err != nil {
			t.Fatal(err)
		}
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the shutting down line", func() bool { return strings.Contains(p.log(), "shutting down") })
		time.Sleep(300 * time.Millisecond)
		if !p.running() {
			t.Fatalf("exited at once (%v); the open transaction should hold the drain\n%s", p.exitErr, p.log())
		}
		// logrotate's postrotate, mid-drain.
		if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		_, commitErr := c.Exec(ctx, "COMMIT")
		select {
		case <-p.exited:
		case <-time.After(15 * time.Second):
			t.Fatalf("did not exit within 15s of the transaction ending\n%s", p.log())
		}
		var ee *exec.ExitError
		if errors.As(p.exitErr, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				t.Errorf("draining serve was killed by SIGHUP (%v) instead of finishing its drain and exiting 0", ws.Signal())
			}
		}
		if p.exitErr != nil {
			t.Errorf("exit: %v, want 0 after a drain", p.exitErr)
		}
		if commitErr != nil {
			t.Errorf("COMMIT of the transaction held through the drain: %v (it had --shutdown-timeout=20s to finish)", commitErr)
		}
		t.Logf("serve log tail:\n%s", tail(p.log(), 5))
	})
}
