package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A child that exits at once is described by the last line it logged, so
// CI's output names the cause (here, as when fencegate g1 found its port
// taken, a listen error).
func TestChildExitedSaysWhy(t *testing.T) {
	dir := t.TempDir()
	c := &child{
		name: "fencegate g1", path: "/bin/sh", log: filepath.Join(dir, "g1.log"),
		args: func() []string {
			return []string{"-c", "echo starting; echo 'fencegate: --grpc-addr: listen tcp 127.0.0.1:43373: bind: address already in use' >&2; exit 1"}
		},
	}
	if err := c.start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); c.running(); {
		if time.Now().After(deadline) {
			t.Fatal("child still running after 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	got := c.exited(c.name)
	want := `fencegate g1 exited: "fencegate: --grpc-addr: listen tcp 127.0.0.1:43373: bind: address already in use" (see ` + c.log + ")"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func TestLastLine(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	long := strings.Repeat("x", 5000)
	for _, tc := range []struct{ name, content, want string }{
		{"empty", "", ""},
		{"trailing-newlines", "a\nb\n\n\n", "b"},
		{"trailing-blanks", "a\nb\n  \n\t\n", "b"},
		{"no-newline", "a\nlast", "last"},
		{"long", "first\n" + long + "\n", strings.Repeat("x", 300) + "…"},
	} {
		if got := lastLine(write(tc.name, tc.content)); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := lastLine(filepath.Join(dir, "missing")); got != "" {
		t.Errorf("missing file: got %q, want empty", got)
	}
}
