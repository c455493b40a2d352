package main

import (
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/proxy/policy"
)

// TestRedTeam28ReadOnlyBindOfOtherUsersDir
//
// Attack: the configuration directory is another user's directory,
// bind-mounted read-only where fencegate reads it: `docker run -v
// /home/deploy/fencegate:/etc/fencegate:ro`, a systemd BindReadOnlyPaths=,
// `mount --bind -o ro`. The files in it are root's (0644). Read-only is a
// property of that one mount, not of the directory: its owner (uid 65534
// here, in a process of its own) still renames files in it through the
// other path, here swapping policy.yaml, a link, between the root-owned
// policy and a policy of its own that allows anyone everything, while the
// policy is reloaded.
//
// What happened (on this code): checkDir returns at once for a directory
// on a read-only mount, before the owner is looked at: the directory uid
// 65534 owns is accepted through the read-only path (and refused through
// the other); the attacker's policy, owned by it, is then read when the
// swap falls between checkFileMode and the read (as in
// TestRedTeam28SymlinkChainThroughOtherUsersDir), and put in force.
//
// What should happen: a read-only mount may excuse a mode (a ConfigMap's
// 0777, written only by the kubelet, root), not an owner: a directory
// owned by a user other than root or fencegate's is refused wherever it is
// mounted. And the file read should be the file judged (open once, fstat,
// read that descriptor).
//
// Severity: medium (a local user owning the bind mount's source replaces
// the policy: anonymous writes and resets of every fence).
func TestRedTeam28ReadOnlyBindOfOtherUsersDir(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("needs root to mount and to hand a directory to another user (make test runs as root)")
	}
	const nobody = 65534
	base, err := os.MkdirTemp("", "rt28-robind-") //nolint:usetesting // uid 65534 must reach it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chmod(base, 0o755))
	src, dst := filepath.Join(base, "deploy"), filepath.Join(base, "etc")
	must(os.Mkdir(src, 0o755))
	must(os.Chown(src, nobody, nobody))
	must(os.Mkdir(dst, 0o755))

	const rules = "rules:\n  - name: ops\n    principals: [\"token:ops\"]\n    fences: [\"*\"]\n    actions: [fence.read]\n"
	const evil = "rules:\n  - name: evil\n    principals: [\"*\"]\n    fences: [\"*\"]\n    actions: [sql.write, fence.admin]\n"
	must(os.WriteFile(filepath.Join(src, "good.yaml"), []byte(rules), 0o644)) // root's
	evilFile := filepath.Join(src, "evil.yaml")
	must(os.WriteFile(evilFile, []byte(evil), 0o644))
	must(os.Chown(evilFile, nobody, nobody))
	link := filepath.Join(src, "policy.yaml")
	must(os.Symlink("good.yaml", link))
	must(os.Lchown(link, nobody, nobody))

	if err := syscall.Mount(src, dst, "", syscall.MS_BIND, ""); err != nil {
		t.Fatalf("bind mount: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dst, syscall.MNT_DETACH) })
	must(syscall.Mount("", dst, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""))
	path := filepath.Join(dst, "policy.yaml")

	if err := checkFileMode("--policy-file", filepath.Join(src, "policy.yaml")); err == nil {
		t.Fatal("control: the policy in the directory uid 65534 owns was accepted through its own path")
	}
	if err := checkFileMode("--policy-file", path); err == nil {
		t.Errorf("HOLE: checkFileMode accepted %s: its directory is owned by uid %d, who writes it through %s; only this mount of it is read-only", path, nobody, src)
	} else {
		t.Logf("refused: %v", err)
		return
	}

	log := slog.New(slog.DiscardHandler)
	reg := prometheus.NewRegistry()
	c := securityConfig{PolicyFile: path, PolicyMode: "enforce"}
	sec, err := newSecurity(c, false, log, reg)
	must(err)
	t.Cleanup(sec.close)
	must(sec.loadPolicy(c, log, reg, nil))

	swap := exec.Command("/usr/bin/perl", "-e", `
		alarm 30; chdir $ARGV[0] or die;
		while (1) {
			symlink("evil.yaml", "a") or die; rename("a", "policy.yaml") or die;
			symlink("good.yaml", "b") or die; rename("b", "policy.yaml") or die;
		}`, src)
	swap.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	must(swap.Start())
	t.Cleanup(func() { _ = swap.Process.Kill(); _ = swap.Wait() })

	deadline := time.Now().Add(5 * time.Second)
	reloads, refused := 0, 0
	for time.Now().Before(deadline) {
		reloads++
		if err := sec.policy.Reload(); err != nil {
			refused++
		}
		if sec.policy.Policy().Decide("", "payments", policy.ActionFenceAdmin).Allowed {
			t.Errorf("HOLE: after %d reloads (%d refused by the file check), uid %d's policy is in force through the read-only mount: an anonymous caller may reset every fence", reloads, refused, nobody)
			return
		}
	}
	t.Logf("%d reloads (%d refused), uid %d's policy never taken", reloads, refused, nobody)
}
