package main

import (
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/proxy/policy"
)

// TestRedTeam25AuthFilesOtherUsersMayReplace
//
// Attack: round 22's fix refuses a --policy-file or --token-auth-file whose
// mode lets group or others write it. Two ways another local user changes
// such a file all the same, with its mode 0644 or 0600 throughout:
//
//   - the file is owned by that user (a deploy or CI account wrote it, an
//     `install -o app`, a file in a repository checked out by another
//     account): its owner rewrites it at will;
//   - the file is root's, but its directory is writable by others without
//     the sticky bit (a shared config directory, mode 0777): anyone renames
//     a file of their own over it.
//
// Here uid 65534 (nobody), in a process of its own, adds a bearer token and
// a rule allowing it sql.write on every fence, each way, and the files are
// reloaded (SIGHUP, or the once-a-second look).
//
// What happened (on this code): checkFileMode looks at the permission bits
// of the file alone: neither its owner nor its directory. Both files are
// taken at start without a word, and the other user's token and rule are
// taken at the reload: token:rt25-evil may write every fence.
//
// What should happen: as sshd's StrictModes (which round 22's test cites,
// "or owned by another non-root user"): refuse (or, with --insecure, warn
// about) a file owned by a user other than root or fencegate's own, and
// one in a directory (up to the root) that such a user may write without
// the sticky bit; at start and at every reload.
//
// Severity: low to medium (local privilege escalation to writing every
// fence, on hosts where the files are laid out so; the mode check that
// was meant to stop it passes).
func TestRedTeam25AuthFilesOtherUsersMayReplace(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("needs root to hand files to another user (make test runs as root, as the throwaway PostgreSQL does)")
	}
	const nobody = 65534
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	const rules = "rules:\n  - name: ops\n    principals: [\"token:ops\"]\n    fences: [\"*\"]\n    actions: [fence.read]\n"
	const evilRule = "  - name: evil\n    principals: [\"token:rt25-evil\"]\n    fences: [\"*\"]\n    actions: [sql.write]\n"
	asNobody := func(t *testing.T, script string) {
		t.Helper()
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("as uid %d: %s: %v\n%s", nobody, script, err, out)
		}
	}
	start := func(t *testing.T, c securityConfig) *security {
		t.Helper()
		log := slog.New(slog.DiscardHandler)
		reg := prometheus.NewRegistry()
		sec, err := newSecurity(c, false, log, reg)
		if err == nil {
			t.Cleanup(sec.close)
			err = sec.loadPolicy(c, log, reg, nil)
		}
		if err != nil {
			t.Logf("serve refused the files: %v", err)
			return nil
		}
		return sec
	}
	check := func(t *testing.T, sec *security, how string) {
		t.Helper()
		sec.reload(slog.New(slog.DiscardHandler))
		c := sec.authn.Identify(nil, "Bearer rt25-evil-secret", nil)
		if c.Principal == "token:rt25-evil" && sec.policy.Decide(c.Principal, "payments", policy.ActionSQLWrite).Allowed {
			t.Errorf("HOLE: %s: after uid %d changed the files and a reload, its own bearer token is %q and may sql.write fence payments", how, nobody, c.Principal)
		}
	}
	mkdir := func(t *testing.T, mode os.FileMode) string {
		t.Helper()
		dir, err := os.MkdirTemp("", "rt25-owner-") //nolint:usetesting // uid 65534 must reach it
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	write := func(t *testing.T, path, content string, mode os.FileMode, uid int) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(path, uid, uid); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("files owned by another user", func(t *testing.T) {
		dir := mkdir(t, 0o755)
		tokens, pol := filepath.Join(dir, "tokens"), filepath.Join(dir, "policy.yaml")
		write(t, tokens, "ops "+sum("ops-secret")+"\n", 0o600, nobody)
		write(t, pol, rules, 0o644, nobody)
		sec := start(t, securityConfig{TokenAuthFile: tokens, PolicyFile: pol, PolicyMode: "enforce"})
		if sec == nil {
			return
		}
		asNobody(t, "echo 'rt25-evil "+sum("rt25-evil-secret")+"' >> "+tokens+" && printf '"+evilRule+"' >> "+pol)
		check(t, sec, "files mode 0600/0644 owned by uid 65534")
	})

	t.Run("root's files in a directory others may write", func(t *testing.T) {
		dir := mkdir(t, 0o777)
		tokens, pol := filepath.Join(dir, "tokens"), filepath.Join(dir, "policy.yaml")
		write(t, tokens, "ops "+sum("ops-secret")+"\n", 0o600, 0)
		write(t, pol, rules, 0o644, 0)
		sec := start(t, securityConfig{TokenAuthFile: tokens, PolicyFile: pol, PolicyMode: "enforce"})
		if sec == nil {
			return
		}
		asNobody(t, "umask 022 && printf 'ops "+sum("ops-secret")+"\\nrt25-evil "+sum("rt25-evil-secret")+"\\n' > "+dir+"/t.new && mv -f "+dir+"/t.new "+tokens+
			" && printf '"+rules+evilRule+"' > "+dir+"/p.new && mv -f "+dir+"/p.new "+pol)
		check(t, sec, "root's files (0600/0644) in a directory of mode 0777")
	})
}
