package election

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/election/embedded"
	"github.com/fencegate/fencegate/election/freeport"
)

// idleWatchEnv sets how long TestWatcherIdleEtcd keeps each watch idle.
const idleWatchEnv = "FENCEGATE_TEST_IDLE_WATCH"

// TestWatcherIdleEtcd keeps a Watcher with the default check interval on an
// etcd that nobody writes to, with no key under its prefix, and checks the
// watch is never given up: no second list, Synced true throughout, no
// warning. It runs against the embedded etcd and against Debian's etcd 3.4
// (package etcd-server), whose progress requests behave differently: 3.4
// always answers one, later versions only once the store's revision has
// reached the watch's start revision.
func TestWatcherIdleEtcd(t *testing.T) {
	idle := 3 * time.Minute
	if s := os.Getenv(idleWatchEnv); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("%s=%q: %v", idleWatchEnv, s, err)
		}
		idle = d
	}
	servers := []struct {
		name  string
		start func(t *testing.T) string
	}{
		{"embedded", startIdleEmbedded},
		{"etcd-server 3.4", startIdleEtcdBinary},
	}
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			t.Parallel()
			ep := srv.start(t)
			c, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
			if err != nil {
				t.Fatalf("etcd client: %v", err)
			}
			t.Cleanup(func() { c.Close() })

			var logs syncBuffer
			w, err := NewWatcher(c, WatcherConfig{
				Prefix: "/idle/elections",
				Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			})
			if err != nil {
				t.Fatal(err)
			}
			runWatcher(t, w)
			waitFor(t, "watcher synced", w.Synced)
			t.Logf("watching an idle etcd for %v (%s to change)", idle, idleWatchEnv)
			for end := time.Now().Add(idle); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
				if !w.Synced() {
					t.Fatalf("watch not synced after %v on an idle etcd; log:\n%s", idle-time.Until(end), logs.String())
				}
			}
			if got := w.lists.Load(); got != 1 {
				t.Errorf("got %d lists of the prefix, want 1; log:\n%s", got, logs.String())
			}
			if got := logs.String(); got != "" {
				t.Errorf("got log lines %q, want none", got)
			}
		})
	}
}

func startIdleEmbedded(t *testing.T) string {
	t.Helper()
	// Free ports are picked before they are bound: another test may take
	// one meanwhile.
	for try := 1; ; try++ {
		srv, err := embedded.Start(t.Context(), embedded.Config{Dir: t.TempDir(), NoFsync: true})
		if errors.Is(err, embedded.ErrPortInUse) && try < 5 {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Close)
		return srv.ClientURL()
	}
}

// startIdleEtcdBinary runs the etcd on PATH (Debian's etcd-server, which
// `make deps` installs) as a one-member cluster on free ports.
func startIdleEtcdBinary(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Fatalf("etcd not found on PATH: install Debian package etcd-server (make deps): %v", err)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", bin, err)
	}
	if !strings.Contains(string(out), "etcd Version: 3.4.") {
		t.Fatalf("%s is not etcd 3.4: %q", bin, out)
	}
	for try := 1; ; try++ {
		ep, logs, err := startEtcdBinary(t, bin)
		if err == nil {
			return ep
		}
		if !strings.Contains(logs, "address already in use") || try == 5 {
			t.Fatalf("%v\n%s", err, logs)
		}
	}
}

// startEtcdBinary starts bin on free ports and waits until it serves. On
// failure it returns the server's output.
func startEtcdBinary(t *testing.T, bin string) (endpoint, output string, err error) {
	t.Helper()
	client, peer := freeport.Addr(t), freeport.Addr(t)
	dir := t.TempDir()
	var logs syncBuffer
	cmd := exec.Command(bin,
		"--name=idle", "--data-dir="+filepath.Join(dir, "data"),
		"--listen-client-urls=http://"+client, "--advertise-client-urls=http://"+client,
		"--listen-peer-urls=http://"+peer, "--initial-advertise-peer-urls=http://"+peer,
		"--initial-cluster=idle=http://"+peer, "--log-outputs=stderr")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return "", "", fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	c, err := clientv3.New(clientv3.Config{Endpoints: []string{client}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return "", logs.String(), fmt.Errorf("etcd client: %w", err)
	}
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		_, err := c.Get(ctx, "health", clientv3.WithCountOnly())
		cancel()
		if err == nil {
			return "http://" + client, "", nil
		}
		select {
		case werr := <-exited:
			exited <- werr // for the cleanup
			return "", logs.String(), fmt.Errorf("etcd exited: %w", werr)
		default:
		}
		if time.Now().After(deadline) {
			return "", logs.String(), fmt.Errorf("etcd not serving after 20s: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
