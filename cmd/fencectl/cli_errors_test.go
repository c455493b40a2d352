package main

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/election/freeport"
	redisthrowaway "github.com/fencegate/fencegate/proxy/redis/throwaway"
)

// TestFenceGetUnknown: `fence get` of a fence fencegate knows nothing of
// is an error naming it, on one line, and status 1, as kubectl get and
// etcdctl users expect; not a row of dashes and status 0. A fence known
// only by its election, with no leader and no mark, is still shown. So is
// `fence reset` of one, which lowered nothing; both name the known fences
// the name is close to.
func TestFenceGetUnknown(t *testing.T) {
	endpoint, prefix := startServe(t)
	c := newClient(t)
	// Election "led" has a leader; "was-led" had one, who is gone.
	for _, name := range []string{"led", "was-led"} {
		if _, err := c.Put(t.Context(), prefix+"/"+name+"/k", "worker-1"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Delete(t.Context(), prefix+"/was-led/k"); err != nil {
		t.Fatal(err)
	}
	base := []string{"--endpoint=" + endpoint}
	waitFor(t, "fencegate to see the elections", func() bool {
		out, code := fencectl(t, nil, append([]string{"fences"}, base...)...)
		return code == 0 && strings.Contains(out, "was-led ")
	})

	notFound := `fencectl: fence "nosuch" not found: no backend holds a high-water mark for it and no election of that name is known (see 'fencectl fences')` + "\n"
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		want     string // the whole output, or with a trailing "*" its start
	}{
		{"unknown", []string{"fence", "get", "nosuch"}, 1, notFound},
		{"unknown, json", []string{"fence", "get", "nosuch", "-w", "json"}, 1, notFound},
		{
			"unknown, close to a known one",
			[]string{"fence", "get", "wsa-led"},
			1,
			`fencectl: fence "wsa-led" not found: no backend holds a high-water mark for it and no election of that name is known (see 'fencectl fences'); did you mean "was-led"?` + "\n",
		},
		// A reset that lowered nothing, of a fence fencegate does not know:
		// most likely a mistyped name, which must not read as done.
		{
			"reset unknown",
			[]string{"fence", "reset", "wsa-led", "--to", "0"},
			1,
			`fencectl: fence "wsa-led" not found: no backend holds a high-water mark for it and no election of that name is known (see 'fencectl fences'); no high-water mark was lowered; did you mean "was-led"?` + "\n",
		},
		{
			"reset known, without a mark",
			[]string{"fence", "reset", "was-led", "--to", "0"},
			0,
			"fence was-led: no high-water mark in any backend; nothing to lower\n",
		},
		{"with a leader", []string{"fence", "get", "led"}, 0, "FENCE  HIGH-WATER  TERM  LEADER\nled    -          *"},
		{"election without a leader", []string{"fence", "get", "was-led"}, 0, "FENCE    HIGH-WATER  TERM  LEADER\nwas-led  -           -     -\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, code := fencectl(t, nil, append(tc.args, base...)...)
			ok := got == tc.want
			if prefix, cut := strings.CutSuffix(tc.want, "*"); cut {
				ok = strings.HasPrefix(got, prefix)
			}
			if code != tc.wantCode || !ok {
				t.Errorf("fencectl %s:\ngot status %d, output\n%s\nwant status %d, output\n%s", strings.Join(tc.args, " "), code, got, tc.wantCode, tc.want)
			}
		})
	}
}

// startServe runs `fencegate serve` on the package's etcd, under an
// election prefix of the test's own, with a throwaway Redis; it returns
// fencegate's HTTP endpoint and the prefix.
func startServe(t *testing.T) (string, string) {
	t.Helper()
	rd, err := redisthrowaway.Start(t.Context(), redisthrowaway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close() })
	dir := t.TempDir()
	bin := filepath.Join(dir, "fencegate")
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command: %v", err)
	}
	if out, err := exec.Command(gobin, "build", "-o", bin, "../fencegate").CombinedOutput(); err != nil {
		t.Fatalf("go build fencegate: %v\n%s", err, out)
	}
	httpAddr, prefix := freeport.Addr(t), testPrefix(t)
	out := &syncBuffer{}
	cmd := exec.Command(bin, "serve", "--etcd-endpoints="+etcdURL, "--election-prefix="+prefix, "--redis-addr="+rd.Addr(),
		"--grpc-addr="+freeport.Addr(t), "--http-addr="+httpAddr)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("fencegate serve did not stop within 30s of SIGINT")
		}
	})
	endpoint := "http://" + httpAddr
	waitFor(t, "fencegate serve to answer /healthz", func() bool {
		select {
		case <-exited:
			t.Fatalf("fencegate serve exited:\n%s", out)
		default:
		}
		resp, err := http.Get(endpoint + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return endpoint, prefix
}

// TestMalformedAddressFlags: a malformed --endpoint or --etcd-endpoints
// is a usage error naming the flag and the value as given, found before
// anything is dialled: status 2, not a dial timeout's status 1.
func TestMalformedAddressFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // the first line
	}{
		{
			[]string{"watch", "--dial-timeout=1s", "--etcd-endpoints=:::"},
			`--etcd-endpoints: endpoint ":::": too many colons; want host:port or a URL such as https://127.0.0.1:2379`,
		},
		{
			[]string{"watch", "--dial-timeout=1s", "--etcd-endpoints=127.0.0.1:1,http://[::1"},
			`--etcd-endpoints: endpoint "http://[::1": missing ']' in host; want host:port or a URL such as https://127.0.0.1:2379`,
		},
		{
			[]string{"watch", "--dial-timeout=1s", "--etcd-endpoints=localhost"},
			`--etcd-endpoints: endpoint "localhost": missing port; want host:port or a URL such as https://127.0.0.1:2379`,
		},
		{
			[]string{"fences", "--endpoint=:::"},
			`--endpoint ":::": invalid port ":::" after host; want host:port or a URL such as http://127.0.0.1:7080`,
		},
		{
			[]string{"fences", "--endpoint=http://[::1"},
			`--endpoint "http://[::1": missing ']' in host; want host:port or a URL such as http://127.0.0.1:7080`,
		},
		{
			[]string{"fences", "--endpoint=127.0.0.1:99999"},
			`--endpoint "127.0.0.1:99999": bad port "99999"; want host:port or a URL such as http://127.0.0.1:7080`,
		},
		{
			[]string{"fences", "--endpoint=10.1.2.3:7080", "--token=s3cret"},
			`--token would go in plain text to http://10.1.2.3:7080, where anyone on the path may read it: use an https:// --endpoint (with --cacert), or a loopback address`,
		},
	} {
		got, code := fencectl(t, nil, tc.args...)
		want := "fencectl " + tc.args[0] + ": " + tc.want + "\nRun 'fencectl " + tc.args[0] + " --help' for usage.\n"
		if code != 2 || got != want {
			t.Errorf("fencectl %s:\ngot status %d, output\n%s\nwant status 2, output\n%s", strings.Join(tc.args, " "), code, got, want)
		}
	}
}
