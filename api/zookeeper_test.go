package api_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api"
	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/election/zookeeper"
	"github.com/fencegate/fencegate/election/zookeeper/throwaway"
	"github.com/fencegate/fencegate/proxy"
)

// kazooWorker is a Python worker campaigning with kazoo's Election
// (testdata/kazoo_elect.py).
type kazooWorker struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	tokens chan int64
}

func startKazooWorker(t *testing.T, hosts, path, id string) *kazooWorker {
	t.Helper()
	cmd := exec.Command("/usr/bin/python3", "testdata/kazoo_elect.py", hosts, path, id)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("kazoo worker: %v", err)
	}
	w := &kazooWorker{cmd: cmd, stdin: stdin, tokens: make(chan int64, 1)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if n, err := strconv.ParseInt(strings.TrimSpace(sc.Text()), 10, 64); err == nil {
				w.tokens <- n
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("kazoo worker %s stderr: %s", id, stderr.String())
		}
	})
	return w
}

// token waits until the worker is elected and returns its token.
func (w *kazooWorker) token(t *testing.T) int64 {
	t.Helper()
	select {
	case n := <-w.tokens:
		return n
	case <-time.After(20 * time.Second):
		t.Fatal("kazoo worker: not elected within 20s")
		return 0
	}
}

// startZooKeeperSource runs a zookeeper term source as fencegate serve
// does, until the test ends.
func startZooKeeperSource(t *testing.T, addr string) *zookeeper.Source {
	t.Helper()
	s, err := zookeeper.New(zookeeper.Config{Servers: []string{addr}, SessionTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = s.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait(); s.Close() })
	waitFor(t, "zookeeper session", s.Connected)
	return s
}

// TestZooKeeperSource: fences routed to the zookeeper source take their
// terms from a ZooKeeper election that kazoo workers campaign in. The
// current leader's token is accepted; the zombie of a leader paused past
// its session is STALE_TOKEN before the new leader writes anything (on a
// replica that watched the change, and on one that verifies from scratch);
// a forged token above every term is UNKNOWN_TERM; the term of a leader
// that resigned with no successor is TERM_ENDED, in PostgreSQL and Redis.
// Nothing is stored for any refusal.
func TestZooKeeperSource(t *testing.T) {
	zk, err := throwaway.Start(t.Context(), throwaway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { zk.Close() })
	routes, err := election.ParseRoutes("zk-*=zookeeper")
	if err != nil {
		t.Fatal(err)
	}
	za, zb := startZooKeeperSource(t, zk.Addr()), startZooKeeperSource(t, zk.Addr())
	rc := func(s *zookeeper.Source) replicaConfig {
		return replicaConfig{
			watch: true, proxy: proxy.DefaultConfig(), http: api.DefaultHTTPServerConfig(), routes: routes,
			others: map[string]election.Source{election.SourceZooKeeper: s},
		}
	}
	a, b := startReplicaWith(t, rc(za)), startReplicaWith(t, rc(zb))
	c := db(t)
	table := ledgerTable(t, c)
	fence := "zk-" + fenceName(t)
	path := zookeeper.DefaultRoot + "/" + fence
	waitRev := func(s *zookeeper.Source, rev int64) {
		t.Helper()
		waitFor(t, fmt.Sprintf("term %d of %s", rev, fence), func() bool { return s.Term(fence).Rev == rev })
	}
	cmd := func(v string) string { return fmt.Sprintf(`{"commands":[["SET","{%s}:k",%q]]}`, fence, v) }

	// Worker A leads.
	wa := startKazooWorker(t, zk.Addr(), path, "A")
	ta := wa.token(t)
	if got := execHTTP(t, a, fence, ta, insert(table, "A", ta)); got.code != http.StatusOK {
		t.Fatalf("leader A's token %d: got HTTP %d %s (%v), want 200", ta, got.code, got.reason, got.body)
	}

	// A pauses past its session; B, waiting behind it, is elected.
	wb := startKazooWorker(t, zk.Addr(), path, "B")
	if err := wa.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	tb := wb.token(t)
	if tb <= ta {
		t.Fatalf("got B's term %d after A's %d, want it higher", tb, ta)
	}
	waitRev(za, tb)
	// A's zombie writes before B has written anything: only the term
	// stands in its way (A's token is the fence's high-water mark).
	wantRefusal(t, execHTTP(t, a, fence, ta, insert(table, "A zombie", ta)), 409, "STALE_TOKEN")
	wantRefusal(t, execHTTP(t, b, fence, ta, insert(table, "A zombie on b", ta)), 409, "STALE_TOKEN")
	wantRefusal(t, redisHTTP(t, a, fence, ta, cmd("A zombie")), 409, "STALE_TOKEN")

	// B writes; a forged token above every term is refused.
	if got := execHTTP(t, b, fence, tb, insert(table, "B", tb)); got.code != http.StatusOK {
		t.Fatalf("leader B's token %d: got HTTP %d %s (%v), want 200", tb, got.code, got.reason, got.body)
	}
	if got := redisHTTP(t, a, fence, tb, cmd("B")); got.code != http.StatusOK {
		t.Fatalf("redis, leader B's token %d: got HTTP %d %s, want 200", tb, got.code, got.reason)
	}
	forged := tb + 1000
	wantRefusal(t, execHTTP(t, a, fence, forged, insert(table, "forged", forged)), 400, "UNKNOWN_TERM")
	wantRefusal(t, execHTTP(t, b, fence, forged, insert(table, "forged on b", forged)), 400, "UNKNOWN_TERM")
	wantRefusal(t, redisHTTP(t, b, fence, forged, cmd("forged")), 400, "UNKNOWN_TERM")

	// B resigns and no one follows (A's session is gone): B's term ended.
	if _, err := io.WriteString(wb.stdin, "resign\n"); err != nil {
		t.Fatal(err)
	}
	waitRev(za, 0)
	waitRev(zb, 0)
	wantRefusal(t, execHTTP(t, a, fence, tb, insert(table, "B after resigning", tb)), 409, "TERM_ENDED")
	wantRefusal(t, execHTTP(t, b, fence, tb, insert(table, "B after resigning on b", tb)), 409, "TERM_ENDED")
	wantRefusal(t, redisHTTP(t, a, fence, tb, cmd("B after resigning")), 409, "TERM_ENDED")

	if n := count(t, c, table); n != 2 {
		t.Fatalf("got %d rows, want the 2 accepted writes", n)
	}
	var v string
	if err := c.QueryRow(t.Context(), "SELECT string_agg(worker, ',' ORDER BY token) FROM "+table).Scan(&v); err != nil || v != "A,B" {
		t.Fatalf("got rows %q (%v), want A,B", v, err)
	}
	if got := za.Term(fence); got.Last != tb || got.HasLeader() {
		t.Fatalf("got term %+v, want no leader and Last %d", got, tb)
	}
}
