package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestCheckFileModeDirs: a file is refused when a directory on its way
// lets others rename a file over it, through a symbolic link too.
func TestCheckFileModeDirs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		dirMode os.FileMode
		link    bool // the flag names a link, in a safe directory, to the file
		want    string
	}{
		{"safe directory", 0o755, false, ""},
		{"group-writable directory", 0o775, false, "is in DIR, writable by group without the sticky bit (mode 0775), who could replace the file: chmod go-w DIR"},
		{"world-writable directory", 0o777, false, "is in DIR, writable by group and others without the sticky bit (mode 0777)"},
		{"sticky directory", 0o777 | os.ModeSticky, false, ""},
		{"link into a world-writable directory", 0o777, true, "is in DIR, writable by group and others"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			top := t.TempDir()
			dir := filepath.Join(top, "d")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, "policy.yaml")
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, tc.dirMode); err != nil {
				t.Fatal(err)
			}
			if tc.link {
				safe := filepath.Join(top, "safe")
				if err := os.Mkdir(safe, 0o755); err != nil {
					t.Fatal(err)
				}
				link := filepath.Join(safe, "policy.yaml")
				if err := os.Symlink(p, link); err != nil {
					t.Fatal(err)
				}
				p = link
			}
			err := checkFileMode("--policy-file", p)
			want := strings.ReplaceAll(tc.want, "DIR", dir)
			switch {
			case want == "" && err != nil:
				t.Errorf("got %v, want no error", err)
			case want != "" && (err == nil || !strings.Contains(err.Error(), "--policy-file "+p+" ") || !strings.Contains(err.Error(), want)):
				t.Errorf("got %v, want an error naming %s and containing %q", err, p, want)
			}
		})
	}
}

// TestCheckFileModeOwners: a file, or a directory on its way, owned by a
// user other than root and fencegate's own is refused.
func TestCheckFileModeOwners(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root to hand files to another user (make test runs as root, as the throwaway PostgreSQL does)")
	}
	const nobody = 65534
	for _, tc := range []struct {
		name            string
		fileUID, dirUID int
		want            string
	}{
		{"root's", 0, 0, ""},
		{"file of another user", nobody, 0, "PATH is owned by " + userName(nobody) + ", not by root, who could change what fencegate trusts: chown 0 PATH"},
		{"directory of another user", 0, nobody, "PATH is in DIR, owned by " + userName(nobody) + ", not by root, who could replace the file: chown 0 DIR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "d")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, "tokens")
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(p, tc.fileUID, tc.fileUID); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(dir, tc.dirUID, tc.dirUID); err != nil {
				t.Fatal(err)
			}
			err := checkFileMode("--token-auth-file", p)
			want := strings.NewReplacer("PATH", p, "DIR", dir).Replace(tc.want)
			switch {
			case want == "" && err != nil:
				t.Errorf("got %v, want no error", err)
			case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
				t.Errorf("got %v, want an error containing %q", err, want)
			}
		})
	}
}

// TestCheckFileModeReadOnlyMount: a directory others may write by its mode
// but on a file system mounted read-only (a Kubernetes ConfigMap volume,
// mode 0777) passes; mounted read-write, it does not.
func TestCheckFileModeReadOnlyMount(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "policy")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "mode=0777,size=64k"); err != nil {
		t.Fatalf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Error(err)
		}
	})
	p := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := checkFileMode("--policy-file", p); err == nil {
		t.Fatalf("read-write mount of mode 0777: got no error, want one")
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_REMOUNT|unix.MS_RDONLY, "mode=0777,size=64k"); err != nil {
		t.Fatalf("remount read-only: %v", err)
	}
	if err := checkFileMode("--policy-file", p); err != nil {
		t.Errorf("read-only mount of mode 0777: got %v, want no error", err)
	}
}
