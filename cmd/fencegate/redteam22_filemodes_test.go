package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRedTeam22WorldWritableAuthFiles
//
// Attack: the --policy-file and --token-auth-file an operator points serve
// at are world-writable (mode 0666: a `cp` under a permissive umask, an
// image built with the wrong mode, a ConfigMap volume with defaultMode
// 0666). Any local user (here uid 65534, nobody) appends one line to each:
// a bearer token of its own, and a rule allowing it sql.write on every
// fence.
//
// What happened: serve starts without a word about the modes, and picks
// both edits up by itself within a second or two (the token file is
// stat'ed on the request path, the policy polled): the unprivileged user
// is now token:rt22-evil, authorized to write any fence, and its write is
// accepted. Nothing is logged but "reloaded". The two files are the whole
// of fencegate's authentication and authorization, yet their modes are
// never looked at, where comparable daemons refuse or warn (sshd
// StrictModes; PostgreSQL refuses a key file with group/world access;
// etcd warns on loose data-dir modes).
//
// What should happen: serve refuses to start (or at the very least logs a
// warning naming the flag and file) when --policy-file or
// --token-auth-file is writable by group or others (or owned by another
// non-root user), and a reload of a file that became so is refused the
// same way, keeping the previous one.
//
// Severity: high where it applies (local privilege escalation to writing
// every fence); the fix is a cheap mode check.
func TestRedTeam22WorldWritableAuthFiles(t *testing.T) {
	e := newRT2Env(t)
	dir, err := os.MkdirTemp("", "rt22-modes-") //nolint:usetesting // must be traversable by uid 65534
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	opsSum := sha256.Sum256([]byte("rt22-ops-secret"))
	tokens := filepath.Join(dir, "tokens")
	policy := filepath.Join(dir, "policy.yaml")
	for path, content := range map[string]string{
		tokens: "ops " + hex.EncodeToString(opsSum[:]) + "\n",
		policy: "rules:\n  - name: ops-read\n    principals: [\"token:ops\"]\n    fences: [\"*\"]\n    actions: [fence.read]\n",
	} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	p, refused := e.tryServe(t, "--token-auth-file="+tokens, "--policy-file="+policy)
	if p == nil {
		// The defence: refused at start, naming a file and its mode
		// (opsec_test.go has the refused reload).
		if !strings.Contains(refused, "writable by group and others") || !strings.Contains(refused, "chmod go-w") {
			t.Errorf("serve exited without naming the loose mode: %s", refused)
		}
		return
	}
	startLog := p.log()

	// Any local user.
	evilSum := sha256.Sum256([]byte("rt22-evil-secret"))
	script := fmt.Sprintf(`printf 'rt22-evil %s\n' >> %s && printf '  - name: rt22-evil\n    principals: ["token:rt22-evil"]\n    fences: ["*"]\n    actions: [sql.write]\n' >> %s`,
		hex.EncodeToString(evilSum[:]), tokens, policy)
	sh := exec.Command("sh", "-c", script)
	sh.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, NoSetGroups: true}}
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("uid 65534 could not edit the files (they are 0666): %v %s", err, out)
	}

	tok, _ := e.lead(t, "rt22modes", "w1")
	write := func() (int, string) {
		req, _ := http.NewRequest("POST", "http://"+p.http+"/v1/fences/rt22modes/sql",
			bytes.NewBufferString(`{"statements":[{"sql":"INSERT INTO rt2 VALUES ('rt22-by-nobody')"}]}`))
		req.Header.Set("Fencing-Token", fmt.Sprint(tok))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer rt22-evil-secret")
		resp, err := rt2HTTP.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var code int
	var body string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if code, body = write(); code == 200 {
			break
		}
	}

	warned := regexp.MustCompile(`(?i)level=(WARN|ERROR).*(mode|writable|permission)`)
	if !warned.MatchString(startLog) {
		t.Errorf("serve started with world-writable --policy-file and --token-auth-file (0666) without refusing or warning:\n%s", startLog)
	}
	if code == 200 {
		t.Errorf("uid 65534 appended a token and a rule to the 0666 files and, %s later, wrote fence rt22modes as token:rt22-evil: %d %s (row present: %v)\nlog:\n%s",
			"a few seconds", code, strings.TrimSpace(body), e.pgIDs(t)["rt22-by-nobody"], tail(p.log(), 6))
	} else {
		t.Logf("attacker's write: %d %s", code, body)
	}
}
