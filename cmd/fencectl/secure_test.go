package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/auth/authtest"
	"github.com/fencegate/fencegate/election/freeport"
)

// secureDev is `fencegate dev` serving TLS, asking clients for a
// certificate of its CA or a bearer token.
type secureDev struct {
	endpoint   string // https://...
	etcd       string // its embedded etcd
	ca         string
	cert, key  string // a client certificate of the CA
	token      string // a bearer secret it accepts
	strangerCA string // a CA it does not trust
}

func startSecureDev(t *testing.T) *secureDev {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "fencegate")
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command: %v", err)
	}
	if out, err := exec.Command(gobin, "build", "-o", bin, "../fencegate").CombinedOutput(); err != nil {
		t.Fatalf("go build fencegate: %v\n%s", err, out)
	}
	ca := authtest.NewCA(t, "fencectl-test")
	srv := ca.Localhost(t, "server")
	client := ca.Issue(t, "ops", authtest.Leaf{CommonName: "ops-1", Client: true})
	stranger := authtest.NewCA(t, "stranger")
	const secret = "fencectl-test-secret"
	sum := sha256.Sum256([]byte(secret))
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("ops "+hex.EncodeToString(sum[:])+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := &secureDev{
		endpoint: "https://" + freeport.Addr(t), etcd: "http://" + freeport.Addr(t),
		ca: ca.File, cert: client.CertFile, key: client.KeyFile, token: secret, strangerCA: stranger.File,
	}
	outPath := filepath.Join(dir, "dev.out")
	out, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "dev", "--etcd-listen="+d.etcd, "--grpc-addr="+freeport.Addr(t),
		"--http-addr="+strings.TrimPrefix(d.endpoint, "https://"), "--pg-listen-addr="+freeport.Addr(t),
		"--redis-listen-addr="+freeport.Addr(t),
		"--cert-file="+srv.CertFile, "--key-file="+srv.KeyFile, "--trusted-ca-file="+ca.File, "--token-auth-file="+tokens)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("fencegate dev did not stop within 30s of SIGINT")
		}
		out.Close()
	})
	deadline := time.Now().Add(2 * time.Minute)
	for {
		b, _ := os.ReadFile(outPath)
		if strings.Contains(string(b), "Ctrl-C stops everything.") {
			return d
		}
		select {
		case err := <-exited:
			exited <- err // for the cleanup, which waits for it
			t.Fatalf("fencegate dev exited: %v\n%s", err, b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("fencegate dev not up after 2 minutes:\n%s", b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fencectl runs fencectl to completion and returns its output and status.
func fencectl(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	p := startFencectl(t, env, args...)
	code := p.wait(t)
	return p.out.String(), code
}

// fencectl's read commands and watch against a fencegate that serves TLS
// and wants a client certificate or a bearer token, and a clear one-line
// error when fencectl cannot prove who it is or cannot trust fencegate.
func TestAgainstSecuredFencegate(t *testing.T) {
	d := startSecureDev(t)
	base := []string{"--endpoint=" + d.endpoint, "--etcd-endpoints=" + d.etcd}

	// A leader of election billing that wrote once, so its fence has a
	// high-water mark; it holds on until released.
	dir := t.TempDir()
	ready, release := filepath.Join(dir, "ready"), filepath.Join(dir, "release")
	script := `curl -sSf --cacert "$CA" -H "Authorization: Bearer $SECRET" -H "Fencing-Token: $FENCEGATE_TOKEN" ` +
		`-XPOST "$FENCEGATE_HTTP_ADDR/v1/fences/$FENCEGATE_FENCE/redis" -d '{"commands":[["SET","{billing}:x","1"]]}' >/dev/null && ` +
		`echo "$FENCEGATE_TOKEN" > "$READY.tmp" && mv "$READY.tmp" "$READY"; while [ ! -e "$GO" ]; do sleep 0.02; done`
	leader := startFencectl(t, []string{"READY=" + ready, "GO=" + release, "CA=" + d.ca, "SECRET=" + d.token},
		append(base, "run", "--election=billing", "--value=worker-1", "--", "sh", "-c", script)...)
	waitFor(t, "the leader's write", func() bool { return exists(ready) || leader.exited() })
	if leader.exited() {
		t.Fatalf("the leader exited (%d):\n%s", leader.code, leader.out)
	}
	token := strings.TrimSpace(readFileT(t, ready))

	row := "billing  " + token + "           " + token + "     worker-1"
	for _, tc := range []struct {
		name     string
		env      []string
		args     []string
		wantCode int
		want     string
	}{
		{"client certificate", nil, []string{"--cacert=" + d.ca, "--cert=" + d.cert, "--key=" + d.key}, 0, row},
		{"bearer token from FENCECTL_TOKEN", []string{"FENCECTL_TOKEN=" + d.token}, []string{"--cacert=" + d.ca}, 0, row},
		{"wrong bearer token", nil, []string{"--cacert=" + d.ca, "--token=wrong"}, 1, "UNAUTHENTICATED"},
		{"no credentials", nil, []string{"--cacert=" + d.ca}, 1, "UNAUTHENTICATED"},
		{"fencegate's CA not trusted", []string{"FENCECTL_TOKEN=" + d.token}, []string{"--cacert=" + d.strangerCA}, 1, "certificate signed by unknown authority"},
		// A usage error: status 2, and a second line pointing to --help.
		{"certificate without key", nil, []string{"--cacert=" + d.ca, "--cert=" + d.cert}, 2, "fencectl fences: --cert and --key go together\nRun 'fencectl fences --help' for usage.\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, code := fencectl(t, tc.env, append(append([]string{"fences"}, base...), tc.args...)...)
			if code != tc.wantCode || !strings.Contains(out, tc.want) {
				t.Errorf("fencectl fences: got status %d, output\n%s\nwant status %d and %q", code, out, tc.wantCode, tc.want)
			}
			if code == 1 && strings.Count(out, "\n") != 1 {
				t.Errorf("fencectl fences: got a %d-line error\n%s\nwant one line", strings.Count(out, "\n"), out)
			}
		})
	}

	creds := append(base, "--cacert="+d.ca, "--cert="+d.cert, "--key="+d.key)
	out, code := fencectl(t, nil, append([]string{"fence", "get", "billing", "-w", "json"}, creds...)...)
	var f fence
	if err := json.Unmarshal([]byte(out), &f); code != 0 || err != nil {
		t.Fatalf("fencectl fence get -w json: status %d, %v\n%s", code, err, out)
	}
	if want := (fence{Name: "billing", HighWater: f.Term, Term: f.Term, Leader: "worker-1", HasLeader: true}); f != want || token != strconvU(f.Term) {
		t.Errorf("fencectl fence get: got %+v, want %+v with term %s", f, want, token)
	}
	out, code = fencectl(t, nil, append([]string{"status"}, creds...)...)
	if code != 0 || !strings.Contains(out, d.endpoint+"  ready") || !strings.Contains(out, "billing   worker-1  "+token) {
		t.Errorf("fencectl status: got status %d\n%s\nwant 0, ready and billing's leader", code, out)
	}

	// reset: an etcd fence's mark at the leader's token is not lowered to
	// it; to 0 it is forgotten, and then shows no mark.
	out, code = fencectl(t, nil, append([]string{"fence", "reset", "billing", "--to", token}, creds...)...)
	if want := "fence billing: high-water mark " + token + " is not above " + token + ": unchanged\n"; code != 0 || out != want {
		t.Errorf("fencectl fence reset --to %s: got status %d\n%s\nwant 0 and %q", token, code, out, want)
	}
	out, code = fencectl(t, nil, append([]string{"fence", "reset", "billing", "--to", "0", "-w", "json"}, creds...)...)
	if want := `"highWaterBefore":"` + token + `"`; code != 0 || !strings.Contains(out, want) || !strings.Contains(out, `"highWater":"0"`) {
		t.Errorf("fencectl fence reset --to 0: got status %d\n%s\nwant 0, %s and highWater 0", code, out, want)
	}
	out, code = fencectl(t, nil, append([]string{"fence", "reset", "billing"}, creds...)...)
	if code != 2 || !strings.Contains(out, "--to is required") {
		t.Errorf("fencectl fence reset without --to: got status %d\n%s\nwant 2 and --to is required", code, out)
	}
	out, code = fencectl(t, nil, append([]string{"fence", "get", "billing", "-w", "json"}, creds...)...)
	if code != 0 || !strings.Contains(out, `"highWater":"0"`) {
		t.Errorf("fencectl fence get after reset --to 0: got status %d\n%s\nwant highWater 0", code, out)
	}

	// watch: the term as it is, its end when the leader's command exits,
	// and the refusal of a write with the ended term.
	w := startFencectl(t, nil, append([]string{"watch", "-w", "json", "--election=billing", "--refusal-interval=100ms"}, creds...)...)
	events := func() []watchEvent {
		var evs []watchEvent
		sc := bufio.NewScanner(strings.NewReader(w.out.String()))
		for sc.Scan() {
			var e watchEvent
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				evs = append(evs, e)
			}
		}
		return evs
	}
	has := func(event, detail string) func() bool {
		return func() bool {
			for _, e := range events() {
				if e.Event == event && (strconvI(e.Term) == detail || e.Reason == detail) {
					return true
				}
			}
			return w.exited()
		}
	}
	waitFor(t, "watch's term event", has("term", token))
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := leader.wait(t); code != 0 {
		t.Fatalf("leader: got status %d, want 0\n%s", code, leader.out)
	}
	waitFor(t, "watch's ended event", has("ended", token))
	// watch's first read of the refusal counters is its baseline, and
	// nothing tells when it happened: refuse writes until one is reported.
	refused := has("refused", "TERM_ENDED")
	for i := 0; !refused(); i++ {
		if i == 20 {
			t.Fatalf("watch reported no refusal of 20 stale writes:\n%s", w.out)
		}
		stale := exec.Command("curl", "-sS", "--cacert", d.ca, "-H", "Authorization: Bearer "+d.token, "-H", "Fencing-Token: "+token,
			"-XPOST", d.endpoint+"/v1/fences/billing/redis", "-d", `{"commands":[["SET","{billing}:x","2"]]}`)
		if out, err := stale.CombinedOutput(); err != nil || !strings.Contains(string(out), "TERM_ENDED") {
			t.Fatalf("the stale write: %v\n%s\nwant TERM_ENDED", err, out)
		}
		for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end) && !refused(); {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if err := w.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := w.wait(t); code != 0 {
		t.Errorf("watch: got status %d after SIGINT, want 0\n%s", code, w.out)
	}
}

func readFileT(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func strconvU(n uint64) string { return strconv.FormatUint(n, 10) }
func strconvI(n int64) string  { return strconv.FormatInt(n, 10) }
