package throwaway_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencegate/fencegate/election/zookeeper/throwaway"
)

// TestStartClose: the server answers a real client, and Close stops it.
func TestStartClose(t *testing.T) {
	s, err := throwaway.Start(context.Background(), throwaway.Options{})
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
