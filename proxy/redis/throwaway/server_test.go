package throwaway_test

import (
	"bufio"
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"github.com/fencegate/fencegate/proxy/redis/throwaway"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// do sends one inline command and returns the first reply line.
func do(t *testing.T, addr, cmd string) (string, error) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(cmd + "\r\n")); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSpace(line)
	if strings.HasPrefix(line, "$") && line != "$-1" {
		line, err = r.ReadString('\n')
		line = strings.TrimSpace(line)
	}
	return line, err
}

// TestLifecycle covers start, a restart on the same port (data and script
// cache gone), a crash, and that Close leaves no process and no directory.
func TestLifecycle(t *testing.T) {
	var logged int
	srv, err := throwaway.Start(t.Context(), throwaway.Options{Logf: func(string, ...any) { logged++ }})
	if err != nil {
		t.Fatal(err)
	}
	addr, dir, pid := srv.Addr(), srv.Dir(), srv.PID()
	if pid == 0 || logged == 0 || !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Errorf("after Start: got pid %d, %d log lines, addr %s; want non-zero, non-zero, 127.0.0.1:port", pid, logged, addr)
	}
	if got, err := do(t, addr, "SET k v"); err != nil || got != "+OK" {
		t.Fatalf("SET: got %q, %v; want +OK", got, err)
	}
	sha, err := do(t, addr, "SCRIPT LOAD \"return 1\"")
	if err != nil {
		t.Fatal(err)
	}

	if err := srv.Restart(t.Context()); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if srv.Addr() != addr || srv.PID() == pid {
		t.Errorf("after Restart: got addr %s pid %d, want %s and a new process", srv.Addr(), srv.PID(), addr)
	}
	if got, err := do(t, addr, "GET k"); err != nil || got != "$-1" {
		t.Errorf("GET after Restart: got %q, %v; want $-1 (no persistence)", got, err)
	}
	if got, err := do(t, addr, "SCRIPT EXISTS "+sha); err != nil || !strings.HasPrefix(got, "*1") {
		t.Errorf("SCRIPT EXISTS after Restart: got %q, %v", got, err)
	}

	crashed := srv.PID()
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if srv.PID() != 0 {
		t.Errorf("PID after Kill: got %d, want 0", srv.PID())
	}
	if _, err := do(t, addr, "PING"); err == nil {
		t.Errorf("PING after Kill: got nil, want an error")
	}
	if err := srv.Restart(t.Context()); err != nil {
		t.Fatalf("Restart after Kill: %v", err)
	}
	if got, err := do(t, addr, "PING"); err != nil || got != "+PONG" {
		t.Errorf("PING after Restart: got %q, %v; want +PONG", got, err)
	}

	last := srv.PID()
	if err := srv.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := srv.Close(); err != nil {
		t.Errorf("second Close: got %v, want nil", err)
	}
	for _, p := range []int{pid, crashed, last} {
		if err := syscall.Kill(p, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d after Close: got %v, want ESRCH (gone)", p, err)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("dir after Close: got %v, want not exist", err)
	}
	if _, err := do(t, addr, "PING"); err == nil {
		t.Errorf("PING after Close: got nil, want an error")
	}
	if err := srv.Restart(t.Context()); err == nil {
		t.Errorf("Restart after Close: got nil, want an error")
	}
}

func TestFixedPortTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dir := t.TempDir()
	_, err = throwaway.Start(t.Context(), throwaway.Options{Port: l.Addr().(*net.TCPAddr).Port, Dir: dir})
	if err == nil {
		t.Fatal("Start on a taken port: got nil, want an error")
	}
	if _, statErr := os.Stat(dir); statErr != nil {
		t.Errorf("given Dir after failed Start: got %v, want it kept", statErr)
	}
}

func TestNotFoundMessage(t *testing.T) {
	if got, want := throwaway.ErrNotFound.Error(), "throwaway redis: redis-server not found (install Debian package redis-server)"; got != want {
		t.Errorf("ErrNotFound: got %q, want %q", got, want)
	}
}

// TestDatabases: one database by default, so SELECT 1 fails; more on
// request.
func TestDatabases(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		databases int
		want      string // reply to SELECT 1
	}{
		{0, "-ERR DB index is out of range"},
		{2, "+OK"},
	} {
		srv, err := throwaway.Start(t.Context(), throwaway.Options{Databases: tt.databases})
		if err != nil {
			t.Fatal(err)
		}
		got, err := do(t, srv.Addr(), "SELECT 1")
		if cerr := srv.Close(); cerr != nil {
			t.Error(cerr)
		}
		if err != nil || got != tt.want {
			t.Errorf("Databases %d: SELECT 1 got %q, %v; want %q", tt.databases, got, err, tt.want)
		}
	}
}
