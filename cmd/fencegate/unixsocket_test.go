package main

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestListenUnix: a Unix socket open to every local user, replacing a socket
// file left by a dead process but neither one in use nor another file,
// and removed on close.
func TestListenUnix(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, ".s.PGSQL.7432")

	// A socket file its listener left behind, as a killed process does.
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ul.SetUnlinkOnClose(false)
	ul.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("the stale socket file is not there: %v", err)
	}

	lis, err := listenUnix(path)
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o777 {
		t.Errorf("mode %v, want 0777", fi.Mode().Perm())
	}
	go func() {
		if c, err := lis.Accept(); err == nil {
			c.Close()
		}
	}()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	c.Close()

	if _, err := listenUnix(path); err == nil || !strings.Contains(err.Error(), "another process listens on it") {
		t.Errorf("a socket in use: got %v, want it refused", err)
	}
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("the socket in use was removed: %v", err)
	}
	lis.Close()
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after close: %v, want the socket file removed", err)
	}

	file := filepath.Join(dir, "data")
	if err := os.WriteFile(file, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := listenUnix(file); err == nil || !strings.Contains(err.Error(), "is not a socket") {
		t.Errorf("a regular file: got %v, want it refused", err)
	}
	if b, _ := os.ReadFile(file); string(b) != "keep" {
		t.Errorf("the regular file was touched")
	}

	// A symlink planted at the socket path, here to a dead socket
	// elsewhere, is neither followed nor replaced: whoever could write the
	// directory chose what is there, and fencegate leaves it to them.
	dead := filepath.Join(t.TempDir(), "dead.sock")
	dl, err := net.Listen("unix", dead)
	if err != nil {
		t.Fatal(err)
	}
	dl.(*net.UnixListener).SetUnlinkOnClose(false)
	dl.Close()
	link := filepath.Join(dir, "link.sock")
	if err := os.Symlink(dead, link); err != nil {
		t.Fatal(err)
	}
	if l, err := listenUnix(link); err == nil || !strings.Contains(err.Error(), "is not a socket") {
		if l != nil {
			l.Close()
		}
		t.Errorf("a symlink to a dead socket: got %v, want it refused", err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode().Type() != os.ModeSymlink {
		t.Errorf("the symlink was replaced: %v %v", fi, err)
	}
	if fi, err := os.Lstat(dead); err != nil || fi.Mode().Type() != os.ModeSocket {
		t.Errorf("the symlink's target was touched: %v %v", fi, err)
	}
}
