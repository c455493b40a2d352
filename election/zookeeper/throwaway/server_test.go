package throwaway_test

import (
	"net"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencegate/fencegate/election/zookeeper/throwaway"
)

// TestStartClose: the server answers a real client, and Close stops it.
func TestStartClose(t *testing.T) {
	s, err := throwaway.Start(t.Context(), throwaway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	conn, _, err := zk.Connect([]string{s.Addr()}, 2*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	path, err := conn.Create("/x", []byte("v"), 0, zk.WorldACL(zk.PermAll))
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if got, _, err := conn.Get(path); err != nil || string(got) != "v" {
		t.Fatalf("get %s: got %q (%v), want v", path, got, err)
	}
	conn.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
		c.Close()
		t.Fatalf("got a connection to %s after Close, want none", s.Addr())
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestKillRestart: a killed server comes back on the same address with
// its nodes, and a client session resumed within its timeout keeps its
// ephemeral node.
func TestKillRestart(t *testing.T) {
	s, err := throwaway.Start(t.Context(), throwaway.Options{MaxSessionTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	conn, events, err := zk.Connect([]string{s.Addr()}, 20*time.Second, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	waitSession(t, conn)
	if _, err := conn.Create("/kept", []byte("v"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Create("/mine", nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	pid := s.PID()
	s.Kill()
	if s.PID() != 0 {
		t.Fatalf("PID after Kill: got %d, want 0", s.PID())
	}
	if c, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
		c.Close()
		t.Fatalf("got a connection to %s after Kill, want none", s.Addr())
	}
	for ev := range events {
		if ev.State == zk.StateDisconnected {
			break
		}
	}
	if err := s.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s.PID() == 0 || s.PID() == pid {
		t.Fatalf("PID after Restart: got %d, want a new process (was %d)", s.PID(), pid)
	}
	waitSession(t, conn)
	for _, p := range []string{"/kept", "/mine"} {
		if ok, _, err := conn.Exists(p); err != nil || !ok {
			t.Errorf("%s after the restart: exists %v (%v), want true", p, ok, err)
		}
	}
	if err := s.Restart(t.Context()); err != nil {
		t.Fatalf("Restart of a running server: %v", err)
	}
}

func waitSession(t *testing.T, conn *zk.Conn) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); conn.State() != zk.StateHasSession; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no session: %s", conn.State())
		}
	}
}

// quiet drops the client's reconnection chatter.
type quiet struct{}

func (quiet) Printf(string, ...any) {}
