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

// TestRedTeam28SymlinkChainThroughOtherUsersDir
//
// Attack: the operator points --policy-file at a root-owned path in a
// root-owned directory, /etc/fencegate/policy.yaml, which is a symbolic
// link into a directory a deploy account owns (a release farm, a
// "current" link, a checkout: /home/deploy/policy.yaml), and that link in
// turn points back at a root-owned file in a root-owned directory
// (/etc/fencegate/policy.real). Every file and directory checkFileMode
// looks at is root's; the link in the middle is not, and neither is the
// directory it lives in. That user (here uid 65534, in a process of its
// own) swaps its link, over and over, between the root-owned policy and a
// policy of its own that allows anyone ("*") sql.write and fence.admin on
// every fence; the policy is reloaded (SIGHUP; the file watcher does the
// same check then read).
//
// What happened (on this code): parentDirs walks the directories of the
// path as given and of the path once every link is resolved, never those
// of a link met half way, so checkFileMode accepts the chain: the deploy
// account's directory is not looked at. checkFileMode and the read are two
// separate walks of the path: when the link points at the root-owned file
// for the check and at the attacker's for the read, the attacker's policy
// is put in force. A few thousand reloads are enough on two cores: the
// anonymous caller may then write and reset every fence.
//
// What should happen: every directory on the way to every link met while
// resolving the path (the directory holding each link) is judged as the
// path's own directories are, so this chain is refused at start (or warned
// about with --insecure); and the file judged is the file read: open it
// once, judge the open file (fstat) and read from that descriptor, so
// nothing swapped between the check and the read is taken.
//
// Severity: medium (a local user who owns any link on the way replaces
// the policy: anonymous writes and resets of every fence), the same local
// privilege escalation round 25 closed for the path's own directories.
func TestRedTeam28SymlinkChainThroughOtherUsersDir(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("needs root to hand a directory to another user (make test runs as root)")
	}
	const nobody = 65534
	base, err := os.MkdirTemp("", "rt28-chain-") //nolint:usetesting // uid 65534 must reach it
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
	etc := filepath.Join(base, "etc")   // root's, 0755: /etc/fencegate
	home := filepath.Join(base, "home") // uid 65534's, 0755: /home/deploy
	must(os.Mkdir(etc, 0o755))
	must(os.Mkdir(home, 0o755))
	must(os.Chown(home, nobody, nobody))

	const rules = "rules:\n  - name: ops\n    principals: [\"token:ops\"]\n    fences: [\"*\"]\n    actions: [fence.read]\n"
	const evil = "rules:\n  - name: evil\n    principals: [\"*\"]\n    fences: [\"*\"]\n    actions: [sql.write, fence.admin]\n"
	realFile := filepath.Join(etc, "policy.real")
	must(os.WriteFile(realFile, []byte(rules), 0o644))
	evilFile := filepath.Join(home, "evil.yaml")
	must(os.WriteFile(evilFile, []byte(evil), 0o644))
	must(os.Chown(evilFile, nobody, nobody))
	middle := filepath.Join(home, "policy.yaml")
	must(os.Symlink(realFile, middle))
	must(os.Lchown(middle, nobody, nobody))
	path := filepath.Join(etc, "policy.yaml")
	must(os.Symlink(middle, path))

	// The chain itself: a link in a directory uid 65534 owns.
	if err := checkFileMode("--policy-file", path); err == nil {
		t.Errorf("HOLE: checkFileMode accepted %s -> %s (in %s, owned by uid %d) -> %s: the directory of the link half way is never judged", path, middle, home, nobody, realFile)
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
	if sec.policy.Policy().Decide("", "payments", policy.ActionSQLWrite).Allowed {
		t.Fatal("the root-owned policy already allows anonymous writes")
	}

	// uid 65534 swaps its link between the root-owned policy (what the
	// check sees) and its own (what the read may see), atomically (rename).
	swap := exec.Command("/usr/bin/perl", "-e", `
		alarm 30; chdir $ARGV[0] or die; my ($good, $n) = ($ARGV[1], 0);
		while (1) {
			symlink("evil.yaml", "a") or die; rename("a", "policy.yaml") or die;
			symlink($good, "b") or die; rename("b", "policy.yaml") or die;
		}`, home, realFile)
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
		if sec.policy.Policy().Decide("", "payments", policy.ActionSQLWrite).Allowed {
			t.Errorf("HOLE: after %d reloads (%d refused by the file check), uid %d's policy is in force: an anonymous caller may sql.write and fence.admin every fence", reloads, refused, nobody)
			return
		}
	}
	t.Logf("%d reloads (%d refused by the file check), uid %d's policy never taken", reloads, refused, nobody)
}

// TestRedTeam28DotDotAfterDirectoryLink
//
// Attack: --policy-file (or --token-auth-file, --trusted-ca-file) is
// given with a ".." after a directory that is a symbolic link:
// /etc/fencegate/conf/../policy.yaml, where /etc/fencegate/conf links to
// /home/deploy/sub. The kernel resolves ".." from where the link led:
// the file read is /home/deploy/policy.yaml, in a directory uid 65534
// owns. The file itself is root's, 0644.
//
// What happened (on this code): parentDirs takes filepath.Abs of the
// path, which removes "conf/.." as text (/etc/fencegate/policy.yaml), and
// resolves links in that other path: neither /home/deploy nor
// /home/deploy/sub is judged, and checkFileMode accepts the file, while
// the same file named /home/deploy/policy.yaml is refused. Its directory's
// owner may rename anything over it, or swap it for a link as in
// TestRedTeam28SymlinkChainThroughOtherUsersDir.
//
// What should happen: the directories judged are those the kernel walks:
// resolve the path as the open does (EvalSymlinks of the path as given,
// before any Clean, or walking it component by component), so that this
// path is refused as /home/deploy/policy.yaml is.
//
// Severity: low to medium (needs such a path in the configuration; then
// the same local replacement of the policy or token file as round 25's).
func TestRedTeam28DotDotAfterDirectoryLink(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("needs root to hand a directory to another user (make test runs as root)")
	}
	const nobody = 65534
	base, err := os.MkdirTemp("", "rt28-dotdot-") //nolint:usetesting // uid 65534 must reach it
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
	etc, home := filepath.Join(base, "etc"), filepath.Join(base, "home")
	sub := filepath.Join(home, "sub")
	must(os.Mkdir(etc, 0o755))
	must(os.Mkdir(home, 0o755))
	must(os.Mkdir(sub, 0o755))
	must(os.Chown(home, nobody, nobody))
	must(os.Chown(sub, nobody, nobody))
	must(os.Symlink(sub, filepath.Join(etc, "conf")))
	file := filepath.Join(home, "policy.yaml")
	must(os.WriteFile(file, []byte("rules: []\n"), 0o644))

	if err := checkFileMode("--policy-file", file); err == nil {
		t.Fatalf("control: %s, in a directory uid %d owns, was accepted", file, nobody)
	}
	path := filepath.Join(etc, "conf") + "/../policy.yaml" // not Join: it would Clean the ".." away
	b, err := os.ReadFile(path)
	must(err)
	if string(b) != "rules: []\n" {
		t.Fatalf("%s does not read %s", path, file)
	}
	if err := checkFileMode("--policy-file", path); err == nil {
		t.Errorf("HOLE: checkFileMode accepted %s, which reads %s (in %s, owned by uid %d), refused when named as it is", path, file, home, nobody)
	}
}
