package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/election/embedded"
	"github.com/fencegate/fencegate/election/netfault"
)

// The test binary doubles as a child for `fencectl run` (writerChild).
const childEnvVar = "FENCECTL_TEST_CHILD"

var (
	etcdURL string // the package's embedded etcd
	binPath string // fencectl, built once
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnvVar) == "writer" {
		writerChild()
		return
	}
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "fencectl-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	gobin, err := exec.LookPath("go")
	if err != nil {
		fmt.Fprintln(os.Stderr, "the go command:", err)
		return 1
	}
	binPath = filepath.Join(dir, "fencectl")
	if out, err := exec.Command(gobin, "build", "-o", binPath, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := embedded.Start(ctx, embedded.Config{Dir: filepath.Join(dir, "etcd"), NoFsync: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	etcdURL = srv.ClientURL()
	code := m.Run()
	srv.Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}

// writerChild is a worker that will not stop on SIGTERM: it appends the
// time (unix nanoseconds) to $OUT every 10ms until killed.
func writerChild() {
	signal.Ignore(syscall.SIGTERM)
	f, err := os.OpenFile(os.Getenv("OUT"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	for {
		fmt.Fprintf(f, "%d\n", time.Now().UnixNano())
		time.Sleep(10 * time.Millisecond)
	}
}

func newClient(t *testing.T) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// testPrefix is an election prefix no other test uses.
func testPrefix(t *testing.T) string {
	t.Helper()
	return "/test/" + strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
}

// waitFor polls cond until it holds or 15 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// proc is a fencectl subprocess.
type proc struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	code int
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// startFencectl runs fencectl with args and extra environment; it is
// killed when the test ends if still running.
func startFencectl(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(binPath, args...), out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start fencectl: %v", err)
	}
	go func() {
		_ = p.cmd.Wait()
		p.code = exitCode(p.cmd.ProcessState, nil)
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// wait waits for fencectl to exit and returns its status.
func (p *proc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(30 * time.Second):
		t.Fatalf("fencectl still running after 30s; output:\n%s", p.out)
		return 0
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// leaderKey reads election's leader key (lowest create revision), if any.
func leaderKey(t *testing.T, c *clientv3.Client, prefix, name string) (key string, createRev int64, lease clientv3.LeaseID, ok bool) {
	t.Helper()
	resp, err := c.Get(t.Context(), prefix+"/"+name+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		t.Fatalf("get leader: %v", err)
	}
	if len(resp.Kvs) == 0 {
		return "", 0, 0, false
	}
	kv := resp.Kvs[0]
	return string(kv.Key), kv.CreateRevision, clientv3.LeaseID(kv.Lease), true
}

func candidates(t *testing.T, c *clientv3.Client, prefix, name string) int64 {
	t.Helper()
	resp, err := c.Get(t.Context(), prefix+"/"+name+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatalf("count candidates: %v", err)
	}
	return resp.Count
}

func readEnvFile(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	return env
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// wroteLine reports whether the file at path holds a complete line: a
// shell's `>> file` creates the file before the command it runs writes,
// so the file's existence is not yet a write.
func wroteLine(path string) bool {
	b, err := os.ReadFile(path)
	return err == nil && bytes.IndexByte(b, '\n') >= 0
}

// lastInt returns the last complete line of the file at path as an int. A
// line still being written (no newline yet) is not one.
func lastInt(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	end := bytes.LastIndexByte(b, '\n')
	if end < 0 {
		t.Fatalf("%s: no complete line in %q", path, b)
	}
	b = b[:end]
	n, err := strconv.ParseInt(string(b[bytes.LastIndexByte(b, '\n')+1:]), 10, 64)
	if err != nil {
		t.Fatalf("%s: last line: %v", path, err)
	}
	return n
}

// newProxy is a netfault proxy to target, closed when the test ends.
func newProxy(t *testing.T, target string) *netfault.Proxy {
	t.Helper()
	p, err := netfault.New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}
