package election

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/election/embedded"
)

// testEtcd is the package's one etcd server; tests may restart it.
var testEtcd struct {
	mu  sync.Mutex
	cfg embedded.Config
	srv *embedded.Server
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "election-etcd-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := embedded.Start(ctx, embedded.Config{Dir: dir, NoFsync: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Restarts reuse the same URLs.
	testEtcd.cfg = embedded.Config{Dir: dir, NoFsync: true, ClientURL: srv.ClientURL(), PeerURL: srv.PeerURL()}
	testEtcd.srv = srv
	code := m.Run()
	testEtcd.srv.Close()
	if code == 0 {
		// A three-member cluster cut in two and mended
		// (TestRedTeam24PartitionedMemberKeepsWatchFresh) leaves peer
		// connections of net/http (etcd's rafthttp) served past its
		// members' Close; the package itself serves and makes no HTTP
		// request.
		if err := goleak.Find(goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
			goleak.IgnoreAnyFunction("net/http.(*connReader).backgroundRead")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}

func endpoints() []string { return []string{testEtcd.cfg.ClientURL} }

// stopEtcd stops the test server; startEtcd starts it again on the same
// data and URLs.
func stopEtcd(t *testing.T) {
	t.Helper()
	testEtcd.mu.Lock()
	defer testEtcd.mu.Unlock()
	testEtcd.srv.Close()
}

func startEtcd(t *testing.T) {
	t.Helper()
	testEtcd.mu.Lock()
	defer testEtcd.mu.Unlock()
	srv, err := embedded.Start(t.Context(), testEtcd.cfg)
	if err != nil {
		t.Fatalf("restart etcd: %v", err)
	}
	testEtcd.srv = srv
}

func newClient(t *testing.T) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// testPrefix returns an election prefix no other test uses.
func testPrefix(t *testing.T) string {
	t.Helper()
	return "/test/" + strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// startWatcher runs a Watcher until the test ends and waits until it is
// synced.
func startWatcher(t *testing.T, c *clientv3.Client, cfg WatcherConfig) *Watcher {
	t.Helper()
	if cfg.CheckInterval == 0 {
		cfg.CheckInterval = 100 * time.Millisecond
	}
	w, err := NewWatcher(c, cfg)
	if err != nil {
		t.Fatalf("NewWatcher: %v", err)
	}
	runWatcher(t, w)
	waitFor(t, "watcher synced", w.Synced)
	return w
}

func runWatcher(t *testing.T, w *Watcher) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: got %v, want nil", err)
		}
	})
}

// etcdCandidate campaigns in an election with etcd's own concurrency package,
// as any etcd client would.
type etcdCandidate struct {
	s   *concurrency.Session
	e   *concurrency.Election
	key string // the key it campaigns with
}

func newCandidate(t *testing.T, c *clientv3.Client, prefix, name string) *etcdCandidate {
	t.Helper()
	s, err := concurrency.NewSession(c, concurrency.WithTTL(30))
	if err != nil {
		t.Fatalf("session: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	pfx := prefix + "/" + name
	return &etcdCandidate{s: s, e: concurrency.NewElection(s, pfx), key: fmt.Sprintf("%s/%x", pfx, s.Lease())}
}

// campaign campaigns and waits until elected.
func (cd *etcdCandidate) campaign(t *testing.T, value string) {
	t.Helper()
	if err := cd.e.Campaign(t.Context(), value); err != nil {
		t.Fatalf("campaign: %v", err)
	}
}

// campaignAsync campaigns in the background, returns once the candidate's
// key exists, and the returned channel yields Campaign's result.
func (cd *etcdCandidate) campaignAsync(t *testing.T, c *clientv3.Client, value string) <-chan error {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- cd.e.Campaign(t.Context(), value) }()
	waitFor(t, "candidate key "+cd.key, func() bool {
		resp, err := c.Get(t.Context(), cd.key)
		return err == nil && len(resp.Kvs) == 1
	})
	return errc
}

func (cd *etcdCandidate) resign(t *testing.T) {
	t.Helper()
	if err := cd.e.Resign(t.Context()); err != nil {
		t.Fatalf("resign: %v", err)
	}
}

// ownEtcd starts an embedded etcd of its own (a history of its own: a
// restore, behind a proxy retargeted to it), stopped when the test ends.
func ownEtcd(t *testing.T) *embedded.Server {
	t.Helper()
	srv, err := embedded.Start(t.Context(), embedded.Config{Dir: t.TempDir(), NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv
}

func clientAt(t *testing.T, endpoint string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func hostOf(srv *embedded.Server) string { return strings.TrimPrefix(srv.ClientURL(), "http://") }

// fillPast puts a key outside the prefix until c's etcd is past rev.
func fillPast(t *testing.T, c *clientv3.Client, rev int64) int64 {
	t.Helper()
	var now int64
	for now <= rev {
		r, err := c.Put(t.Context(), "/filler", "x")
		if err != nil {
			t.Fatal(err)
		}
		now = r.Header.Revision
	}
	return now
}

// awaitFollows elects leaders of election "other" under prefix in c's etcd
// until w, synced, reports one: w follows that etcd.
func awaitFollows(t *testing.T, w *Watcher, c *clientv3.Client, prefix string) {
	t.Helper()
	for i := 0; ; i++ {
		if _, err := c.Put(t.Context(), fmt.Sprintf("%s/other/k%d", prefix, i), "new"); err != nil {
			t.Fatal(err)
		}
		if w.Synced() && w.Term("other").HasLeader() {
			return
		}
		if i == 100 {
			t.Fatal("the watch never followed the restored etcd")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
